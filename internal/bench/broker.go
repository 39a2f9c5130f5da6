package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ChildBroker is a Kafka broker in a child process (`parley bench broker`),
// so that a bench process holds the gateway alone, as a production gateway
// does, and the broker's memory and CPU are measured apart from it.
type ChildBroker struct {
	Addrs []string
	PID   int
	stop  func()
}

// StartBroker runs command and reads the broker's addresses, comma-separated,
// from the first line it prints.
func StartBroker(command []string) (*ChildBroker, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: broker: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: broker: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start broker %q: %w", command, err)
	}
	exited := make(chan struct{})
	stop := func() {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	go func() {
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(exited)
	}()
	line = strings.TrimSpace(line)
	if err != nil {
		stop()
		return nil, fmt.Errorf("bench: broker %q printed no address: %w", command, err)
	}
	return &ChildBroker{Addrs: strings.Split(line, ","), PID: cmd.Process.Pid, stop: stop}, nil
}

// Stop closes the broker's stdin and waits for it to exit, killing it after 10 s.
func (b *ChildBroker) Stop() { b.stop() }

// CPU is the user and system CPU time the broker has used so far (0 when
// /proc cannot say).
func (b *ChildBroker) CPU() time.Duration { return procCPU(b.PID) }

// procCPU reads the user and system CPU time of process pid from
// /proc/PID/stat, in clock ticks of 10 ms (USER_HZ is 100 on Linux); 0 when
// it cannot be read.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, field 2, is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, the 12th and 13th after it.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
