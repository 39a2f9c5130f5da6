package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/parleyhq/parley/rollout/abtest"
	"github.com/parleyhq/parley/schema"
)

// ABConfig configures RunAB, the A/B statistics simulation.
type ABConfig struct {
	// Seeds is how many simulated experiments each scenario runs.
	Seeds int
	// Seed makes the run reproducible.
	Seed uint64
	// Workers run seeds in parallel (default GOMAXPROCS).
	Workers    int
	Analysis   abtest.Config
	Guardrails abtest.GuardrailConfig
}

// DefaultABConfig runs 1,000 seeds of each scenario with the product's
// default analysis and guardrails.
func DefaultABConfig() ABConfig {
	return ABConfig{Seeds: 1000, Seed: 1, Workers: runtime.GOMAXPROCS(0),
		Analysis: abtest.DefaultConfig(), Guardrails: abtest.DefaultGuardrailConfig()}
}

// Validate reports the first setting out of range.
func (c ABConfig) Validate() error {
	if c.Seeds < 1 || c.Workers < 1 {
		return fmt.Errorf("bench ab: seeds %d and workers %d must be positive", c.Seeds, c.Workers)
	}
	return errors.Join(c.Analysis.Validate(), c.Guardrails.Validate())
}

// ABReport is what `parley bench ab` writes. Every rate is a share of the
// seeds; the analysis in every scenario is abtest.Judge (and abtest.Decide
// where a verdict is measured) on tallies kept up to date player by
// player, one look per 30 simulated seconds, the sequential state carried
// from look to look as the analysis owner does.
type ABReport struct {
	Seeds int `json:"seeds"`
	// AAFalsePositiveRate: A/A, 2,000 players, 10 % canary, sessions per
	// player geometric with mean 15, between-player share of the variance
	// of turns 0.3: the share of seeds whose Avg.L test was ever Better or
	// Worse. ...SessionLevel runs the same test with every session as its
	// own unit, as the analysis did before issue 16.
	AAFalsePositiveRate             float64 `json:"aa_false_positive_rate"`
	AAFalsePositiveRateSessionLevel float64 `json:"aa_false_positive_rate_session_level"`
	// CICoverage and Power: the same experiment with +0.5 turns on the
	// canary: the share of seeds whose final always-valid CI holds +0.5,
	// and whose test ended Better.
	CICoverage float64 `json:"ci_coverage"`
	Power      float64 `json:"power"`
	// GuardrailFalseRollbackRate: A/A at 5 % weight for 8 simulated hours
	// (12 sessions/s): the share of seeds Decide ever rolled back.
	GuardrailFalseRollbackRate float64 `json:"guardrail_false_rollback_rate"`
	// GuardrailDetectionRate: the canary's error rate 3 points higher, at
	// 20 % weight: the share of seeds rolled back within 30 minutes, and
	// the median minutes to the rollback of those that were.
	GuardrailDetectionRate    float64 `json:"guardrail_detection_rate"`
	GuardrailDetectionMinutes float64 `json:"guardrail_detection_median_minutes"`
	// SRMFalseAlarmRate and SRMDetectionRate: 1,000,000 players at 10 %
	// canary, checked once at the end, without and with 2 % of canary
	// starts dropped. SRMFalseAlarmRateEveryLook is the share of the A/A
	// experiments of the first scenario whose SRM check failed at any look.
	SRMFalseAlarmRate          float64 `json:"srm_false_alarm_rate"`
	SRMDetectionRate           float64 `json:"srm_detection_rate"`
	SRMFalseAlarmRateEveryLook float64 `json:"srm_false_alarm_rate_every_look"`
	// CUPEDVarianceRatio: adjusted ÷ unadjusted variance of the Avg.L
	// difference with a pre-exposure covariate correlated 0.6 with the
	// players' turns (the mean over seeds; 1 − 0.6² = 0.64 expected).
	CUPEDVarianceRatio float64 `json:"cuped_variance_ratio"`
	ElapsedSeconds     float64 `json:"elapsed_seconds"`
}

// Simulation constants.
const (
	abLook       = 30 * time.Second
	abTurnsMean  = 6.0
	abTurnsVar   = 4.0
	abPlayerICC  = 0.3
	abErrorRate  = 0.02
	abRefusal    = 0.01
	abLatencyLog = 6.5 // ln ms: about 665 ms median
)

var abStart = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// RunAB runs every scenario over cfg.Seeds seeds.
func RunAB(ctx context.Context, cfg ABConfig) (ABReport, error) {
	if err := cfg.Validate(); err != nil {
		return ABReport{}, err
	}
	began := time.Now()
	type result struct {
		aa, aaSession, aaSRM, covered, power, falseRollback, detected, srmFalse, srmDetected bool
		detectMinutes, cupedRatio                                                            float64
	}
	results := make([]result, cfg.Seeds)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() {
			for i := range jobs {
				seed := cfg.Seed*1_000_003 + uint64(i)
				var r result
				aa := simTurns(seed, 0, cfg)
				r.aa, r.aaSession, r.aaSRM = aa.significant, aa.sessionSignificant, aa.srmFailed
				eff := simTurns(seed, 0.5, cfg)
				r.covered, r.power = eff.covers, eff.better
				r.falseRollback, _ = simGuardrails(seed, 0.05, 0, 8*time.Hour, cfg)
				var at time.Duration
				r.detected, at = simGuardrails(seed, 0.20, 0.03, 30*time.Minute, cfg)
				r.detectMinutes = at.Minutes()
				r.srmFalse, r.srmDetected = simSRM(seed, 0), simSRM(seed, 0.02)
				r.cupedRatio = simCUPED(seed, cfg)
				results[i] = r
			}
		})
	}
	for i := range cfg.Seeds {
		if ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return ABReport{}, err
	}
	rep := ABReport{Seeds: cfg.Seeds}
	share := func(f func(result) bool) float64 {
		n := 0
		for _, r := range results {
			if f(r) {
				n++
			}
		}
		return float64(n) / float64(len(results))
	}
	rep.AAFalsePositiveRate = share(func(r result) bool { return r.aa })
	rep.AAFalsePositiveRateSessionLevel = share(func(r result) bool { return r.aaSession })
	rep.CICoverage = share(func(r result) bool { return r.covered })
	rep.Power = share(func(r result) bool { return r.power })
	rep.GuardrailFalseRollbackRate = share(func(r result) bool { return r.falseRollback })
	rep.GuardrailDetectionRate = share(func(r result) bool { return r.detected })
	rep.SRMFalseAlarmRate = share(func(r result) bool { return r.srmFalse })
	rep.SRMDetectionRate = share(func(r result) bool { return r.srmDetected })
	rep.SRMFalseAlarmRateEveryLook = share(func(r result) bool { return r.aaSRM })
	var minutes []float64
	for _, r := range results {
		rep.CUPEDVarianceRatio += r.cupedRatio / float64(len(results))
		if r.detected {
			minutes = append(minutes, r.detectMinutes)
		}
	}
	rep.GuardrailDetectionMinutes = abtest.Percentile(minutes, 50)
	rep.ElapsedSeconds = time.Since(began).Seconds()
	return rep, nil
}

// abEvent is one ended session of a simulated player, in the bucket of
// the look it precedes.
type abEvent struct {
	player int32
	turns  int32
}

// turnsDraw returns a session's turns: the player's mean plus session
// noise, rounded, at least 1.
func turnsDraw(rng *rand.Rand, playerMean float64) int32 {
	t := math.Round(playerMean + rng.NormFloat64()*math.Sqrt((1-abPlayerICC)*abTurnsVar))
	return int32(max(t, 1))
}

func playerMean(rng *rand.Rand, effect float64) float64 {
	return abTurnsMean + effect + rng.NormFloat64()*math.Sqrt(abPlayerICC*abTurnsVar)
}

// geometric draws a count ≥ 1 with the given mean.
func geometric(rng *rand.Rand, mean float64) int {
	p := 1 / mean
	return 1 + int(math.Floor(math.Log(1-rng.Float64())/math.Log1p(-p)))
}

type turnsResult struct {
	significant, sessionSignificant, srmFailed, covers, better bool
}

// simTurns is the Avg.L scenario: 2,000 players arriving over the first
// hour, 10 % on the canary (with effect added to its turns), sessions per
// player geometric with mean 15 and 4 minutes apart on average, analysed
// every 30 s for 6 hours both per player and per session.
func simTurns(seed uint64, effect float64, cfg ABConfig) turnsResult {
	const players, canaryShare, horizon = 2000, 0.10, 6 * time.Hour
	rng := rand.New(rand.NewPCG(seed, 1+math.Float64bits(effect)))
	looks := int(horizon / abLook)
	buckets := make([][]abEvent, looks)
	arms := make([]string, players)
	for p := range players {
		arms[p] = schema.ArmStable
		eff := 0.0
		if rng.Float64() < canaryShare {
			arms[p], eff = schema.ArmCanary, effect
		}
		mean := playerMean(rng, eff)
		at := rng.Float64() * float64(time.Hour)
		for range geometric(rng, 15) {
			at += rng.ExpFloat64() * float64(4*time.Minute)
			b := int(time.Duration(at) / abLook)
			if b >= looks {
				break
			}
			buckets[b] = append(buckets[b], abEvent{player: int32(p), turns: turnsDraw(rng, mean)})
		}
	}
	acfg := cfg.Analysis
	acfg.CanaryShare = canaryShare
	totals := make([]abtest.Player, players)
	for p := range totals {
		totals[p].Arm = arms[p]
	}
	var byPlayer, bySession abtest.Tally
	var stP, stS abtest.State
	var out turnsResult
	for b := range looks {
		if len(buckets[b]) == 0 {
			continue // nothing new: the look would repeat the last
		}
		for _, e := range buckets[b] {
			p := &totals[e.player]
			a := byPlayer.Arm(p.Arm)
			if p.Sessions > 0 {
				a.Remove(*p)
			}
			p.Sessions++
			p.Turns += int(e.turns)
			a.Add(*p)
			bySession.Arm(p.Arm).Add(abtest.Player{Arm: p.Arm, Sessions: 1, Turns: int(e.turns)})
		}
		at := abStart.Add(time.Duration(b+1) * abLook)
		rp := abtest.Judge(stP, "sim", byPlayer, acfg, at)
		rs := abtest.Judge(stS, "sim", bySession, acfg, at)
		stP, stS = rp.State, rs.State
		out.significant = out.significant || rp.AvgL.Seq.Better || rp.AvgL.Seq.Worse
		out.sessionSignificant = out.sessionSignificant || rs.AvgL.Seq.Better || rs.AvgL.Seq.Worse
		out.srmFailed = out.srmFailed || rp.SRM.Failed
	}
	q := stP.AvgL
	out.better = q.Better
	out.covers = q.Looks > 0 && !q.Empty && q.Lo <= effect && effect <= q.Hi
	return out
}

// guardPlayer is a simulated player of the guardrail scenario.
type guardPlayer struct {
	totals    abtest.Player
	mean      float64 // turns
	errorRate float64
	latency   float64 // ln ms of the player's median exchange
}

// simGuardrails is the guardrail scenario: players arrive at 2.4/s from an
// hour before the canary starts, play a geometric number of sessions with
// mean 5 (5 minutes apart on average, 12 sessions/s in all; only sessions
// after the start count), weight of them on the canary, whose error rate is
// raised by errorIncrease. Every session ends with an error at the
// player's rate (mean 2 %, varying between players), each exchange is
// refused with probability 1 % and takes a log-normal latency around the
// player's own median. It reports whether abtest.Decide rolled the canary
// back within horizon, and when.
func simGuardrails(seed uint64, weight, errorIncrease float64, horizon time.Duration, cfg ABConfig) (bool, time.Duration) {
	const arrivals, sessionsMean, gap = 2.4, 5.0, 5 * time.Minute
	rng := rand.New(rand.NewPCG(seed, 2+math.Float64bits(weight)))
	looks := int(horizon / abLook)
	buckets := make([][]abEvent, looks)
	var players []guardPlayer
	warm := time.Hour.Seconds() // players already playing when the canary starts
	for at := rng.ExpFloat64()/arrivals - warm; at < horizon.Seconds(); at += rng.ExpFloat64() / arrivals {
		p := guardPlayer{totals: abtest.Player{Arm: schema.ArmStable}}
		errs := abErrorRate * math.Exp(0.5*rng.NormFloat64()-0.125)
		if rng.Float64() < weight {
			p.totals.Arm = schema.ArmCanary
			errs += errorIncrease
		}
		p.mean, p.errorRate = playerMean(rng, 0), errs
		p.latency = abLatencyLog + 0.2*rng.NormFloat64()
		id := int32(len(players))
		players = append(players, p)
		t := at
		for range geometric(rng, sessionsMean) {
			t += rng.ExpFloat64() * gap.Seconds()
			if t < 0 {
				continue // before the experiment
			}
			b := int(t / abLook.Seconds())
			if b >= looks {
				break
			}
			buckets[b] = append(buckets[b], abEvent{player: id, turns: turnsDraw(rng, p.mean)})
		}
	}
	acfg := cfg.Analysis
	acfg.CanaryShare = weight
	var tally abtest.Tally
	var st abtest.State
	var stableLatencies []float64
	// The latencies of each arm's slow-exchange blocks (abtest.SlowBlock
	// long, an exchange in one of a look's at random) wait until the slow
	// threshold is frozen; each look then counts the blocks it completed.
	perLook := int(abLook / abtest.SlowBlock)
	blocks, counted := map[string][][]float64{}, map[string]int{}
	for b := range looks {
		for _, e := range buckets[b] {
			p := &players[e.player]
			a := tally.Arm(p.totals.Arm)
			if p.totals.Sessions > 0 {
				a.Remove(p.totals)
			}
			p.totals.Sessions++
			p.totals.Turns += int(e.turns)
			if e.turns <= 1 {
				p.totals.Early++
			}
			if rng.Float64() < p.errorRate {
				p.totals.Errors++
			}
			arm := blocks[p.totals.Arm]
			for len(arm) < (b+1)*perLook {
				arm = append(arm, nil)
			}
			for range e.turns {
				p.totals.Exchanges++
				if rng.Float64() < abRefusal {
					p.totals.Refused++
				}
				lat := math.Round(math.Exp(p.latency + 0.4*rng.NormFloat64()))
				k := b*perLook + rng.IntN(perLook)
				arm[k] = append(arm[k], lat)
				if p.totals.Arm == schema.ArmStable && tally.SlowThresholdMS == 0 {
					stableLatencies = append(stableLatencies, lat)
				}
			}
			blocks[p.totals.Arm] = arm
			a.Add(p.totals)
		}
		// The product freezes the slow threshold as Update does: stable's
		// p95 once both arms have the burn-in.
		if tally.SlowThresholdMS == 0 && tally.Stable.Players >= acfg.SeqMinPlayers && tally.Canary.Players >= acfg.SeqMinPlayers {
			tally.SlowThresholdMS = abtest.SlowThreshold(stableLatencies, acfg.SlowFloorMS)
			stableLatencies = nil
		}
		if tally.SlowThresholdMS > 0 {
			for arm, bs := range blocks {
				for i := counted[arm]; i < len(bs); i++ {
					slow := 0
					for _, lat := range bs[i] {
						if lat > tally.SlowThresholdMS {
							slow++
						}
					}
					tally.Arm(arm).AddBlock(len(bs[i]), slow)
					bs[i] = nil
				}
				counted[arm] = len(bs)
			}
		}
		at := abStart.Add(time.Duration(b+1) * abLook)
		rep := abtest.Judge(st, "sim", tally, acfg, at)
		st = rep.State
		if abtest.Decide(rep, cfg.Guardrails).Verdict == abtest.Rollback {
			return true, time.Duration(b+1) * abLook
		}
	}
	return false, 0
}

// simSRM counts 1,000,000 players into arms at a 10 % canary share, drops
// each canary player with probability drop (a canary whose starts are
// lost) and reports whether abtest.SRMTest fails.
func simSRM(seed uint64, drop float64) bool {
	const players, share = 1_000_000, 0.10
	rng := rand.New(rand.NewPCG(seed, 3+math.Float64bits(drop)))
	var stable, canary int
	for range players {
		switch {
		case rng.Float64() >= share:
			stable++
		case drop == 0 || rng.Float64() >= drop:
			canary++
		}
	}
	return abtest.SRMTest(stable, canary, share).Failed
}

// simCUPED is 2,000 players at 10 % canary with one session each of
// turns 30 + 8z and a pre-exposure exchange length 30 + 8(0.6z + 0.8z′)
// (correlation 0.6): the ratio of the CUPED-adjusted to the unadjusted
// variance of the Avg.L difference, from the report's variance reduction.
func simCUPED(seed uint64, cfg ABConfig) float64 {
	const players, share = 2000, 0.10
	rng := rand.New(rand.NewPCG(seed, 4))
	var t abtest.Tally
	for range players {
		z, z2 := rng.NormFloat64(), rng.NormFloat64()
		p := abtest.Player{Arm: schema.ArmStable, Sessions: 1, Turns: int(max(math.Round(30+8*z), 1)),
			Pre: 30 + 8*(0.6*z+0.8*z2)}
		if rng.Float64() < share {
			p.Arm = schema.ArmCanary
		}
		t.Arm(p.Arm).Add(p)
	}
	rep := abtest.Judge(abtest.State{}, "sim", t, cfg.Analysis, abStart)
	return 1 - rep.AvgL.VarianceReduction
}
