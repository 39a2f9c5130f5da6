package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	cases := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"addr", func(c *Config) { c.Addr = "nowhere" }, "addr"},
		{"deployment", func(c *Config) { c.Deployment = "a b" }, "deployment"},
		{"prefix", func(c *Config) { c.KeyPrefix = "a b" }, "key prefix"},
		{"max turns", func(c *Config) { c.MaxTurns = 0 }, "max turns"},
		{"idle", func(c *Config) { c.IdleTimeout = 0 }, "idle timeout"},
		{"message over body", func(c *Config) { c.MaxMessageBytes = int(c.MaxBodyBytes) }, "max message bytes"},
		{"temperature", func(c *Config) { c.Sampling.Temperature = 3 }, "temperature"},
		{"rate without burst", func(c *Config) { c.PlayerRate, c.PlayerBurst = 1, 0 }, "player rate"},
		{"default npc", func(c *Config) { c.DefaultNPC = "nobody" }, "default npc"},
		{"empty card", func(c *Config) { c.Personas["x"] = Persona{Name: "X"} }, "no card"},
		{"request timeout", func(c *Config) { c.RequestTimeout = -time.Second }, "request timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.change(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate() = %v; want an error naming %q", err, c.want)
			}
		})
	}
}

func TestLoadPersonas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "personas.json")
	data := `{"smith": {"name": "Bram", "card": "You are Bram the blacksmith.", "greeting": "Need a blade?"}}`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LoadPersonas(path)
	if err != nil || got["smith"].Card != "You are Bram the blacksmith." || got["smith"].Greeting != "Need a blade?" {
		t.Fatalf("LoadPersonas = %+v, %v; want Bram", got, err)
	}
	cfg := DefaultConfig()
	cfg.Personas, cfg.DefaultNPC = got, "smith"
	if err := cfg.Validate(); err != nil {
		t.Errorf("config with loaded personas: %v", err)
	}
	if _, err := LoadPersonas(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("LoadPersonas of a missing file succeeded")
	}
}
