package learner

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/parleyhq/parley/learner/rl"
)

// The learner's health series. Labels carry partitions, gate statistics and
// sides, never player data.
const (
	metricConsumerLag     = "parley.learner.consumer.lag"
	metricStored          = "parley.learner.stored_dialogues"
	metricOpenSessions    = "parley.learner.open_sessions"
	metricRefreshRuns     = "parley.learner.refresh.runs"
	metricRefreshPub      = "parley.learner.refresh.published"
	metricRefreshLastRun  = "parley.learner.refresh.last_run_time"
	metricRefreshAccepted = "parley.learner.refresh.last_accepted"
	metricRefreshGate     = "parley.learner.refresh.gate"
	metricRefreshLoss     = "parley.learner.refresh.last_loss"
	metricCycleRuns       = "parley.learner.cycle.runs"
	metricCycleLastRun    = "parley.learner.cycle.last_run_time"
	metricCycleAccepted   = "parley.learner.cycle.last_accepted"
	metricCycleGate       = "parley.learner.cycle.gate"
	metricCycleLoss       = "parley.learner.cycle.last_loss"
	metricCycleReferee    = "parley.learner.cycle.referee_passed"
)

// RegisterMetrics reports the learner's health on meter at every
// collection: consumer lag per partition, stored dialogues, open sessions,
// and the user-agent refresh's runs with its gates' values (the fidelity
// gate's ρ and termination log-loss and, when the referee measured them,
// its τ, τ's CI, Pearson and simulated/real Avg.L, of the current agent
// before and the refreshed one after), the calibration fitted to the
// refreshed agent and its last training loss.
// Unregister the returned registration before the learner goes away.
func (l *Learner) RegisterMetrics(meter metric.Meter) (metric.Registration, error) {
	var errs []error
	gauge := func(name, desc, unit string) metric.Float64ObservableGauge {
		g, err := meter.Float64ObservableGauge(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return g
	}
	counter := func(name, desc string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	lag := gauge(metricConsumerLag, "Session events of a partition not yet fetched, as of its last fetch.", "{record}")
	stored := gauge(metricStored, "Dialogues in the learner's session store.", "{dialogue}")
	open := gauge(metricOpenSessions, "Sessions begun in the event log and not yet ended.", "{session}")
	runs := counter(metricRefreshRuns, "User-agent refreshes finished (kept across restarts).")
	pub := counter(metricRefreshPub, "User-agent refreshes whose version the fidelity gate published.")
	lastRun := gauge(metricRefreshLastRun, "Unix time of the last refresh (or postponement).", "s")
	accepted := gauge(metricRefreshAccepted, "1 when the fidelity gate published the last refresh this process ran, else 0.", "")
	gate := gauge(metricRefreshGate, "The gates' inputs of the last refresh, of the user agent before and after: stat rho or term_log_loss (fidelity gate), kendall_tau, kendall_tau_ci_low, kendall_tau_ci_high, pearson or sim_real_avg_l (referee gate, when it measured them); the refreshed agent's calibration (side after: calibration_scale and calibration_offset, 0 and 0 when none was fitted, calibration_early_1 … 3, the feature weights calibration_on_last … calibration_wording, calibration_decisions).", "")
	loss := gauge(metricRefreshLoss, "Training loss of the last step of the last refresh.", "")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for p, n := range l.consumer.PartitionLag() {
			o.ObserveFloat64(lag, float64(n), metric.WithAttributes(attribute.String("partition", strconv.Itoa(p))))
		}
		o.ObserveFloat64(stored, float64(l.store.Len()))
		o.ObserveFloat64(open, float64(l.consumer.openSessions()))
		if l.refresher == nil {
			return nil
		}
		st := l.refresher.status.Load()
		if st == nil {
			return nil
		}
		o.ObserveInt64(runs, int64(st.Refreshes))
		o.ObserveInt64(pub, int64(st.Published))
		if !st.LastAt.IsZero() {
			o.ObserveFloat64(lastRun, float64(st.LastAt.UnixMilli())/1000)
		}
		if last := st.Last; last != nil {
			o.ObserveFloat64(accepted, boolFloat(last.Published))
			for _, v := range []struct {
				stat, side string
				value      float64
			}{
				{"rho", "before", last.RhoBefore}, {"rho", "after", last.RhoAfter},
				{"term_log_loss", "before", last.TermLogLossBefore}, {"term_log_loss", "after", last.TermLogLossAfter},
				{"end_log_loss", "before", last.EndLogLossBefore}, {"end_log_loss", "after", last.EndLogLossAfter},
			} {
				o.ObserveFloat64(gate, v.value, metric.WithAttributes(attribute.String("stat", v.stat), attribute.String("side", v.side)))
			}
			for _, side := range []struct {
				name string
				rep  *rl.RefereeReport
			}{{"before", last.RefereeBefore}, {"after", last.RefereeAfter}} {
				if side.rep == nil {
					continue
				}
				for _, v := range []struct {
					stat  string
					value float64
				}{
					{"kendall_tau", side.rep.KendallTau}, {"kendall_tau_ci_low", side.rep.KendallTauCILow},
					{"kendall_tau_ci_high", side.rep.KendallTauCIHigh}, {"pearson", side.rep.Pearson}, {"sim_real_avg_l", side.rep.SimRealAvgL},
					{"sim_real_exp_l", side.rep.SimRealExpL},
				} {
					o.ObserveFloat64(gate, v.value, metric.WithAttributes(attribute.String("stat", v.stat), attribute.String("side", side.name)))
				}
			}
			if c := last.Calibration; c != nil {
				for stat, value := range c.Calibration.Metrics(c.Decisions) {
					o.ObserveFloat64(gate, value, metric.WithAttributes(attribute.String("stat", stat), attribute.String("side", "after")))
				}
			}
			o.ObserveFloat64(loss, last.Loss)
		}
		return nil
	}, lag, stored, open, runs, pub, lastRun, accepted, gate, loss)
}

// RegisterMetrics reports the AT-GRPO cycle's status on meter: cycles run,
// when the last ran, whether the referee gate published its candidate, the
// gate's inputs (Avg.L and Avg.r of candidate and parent with the user
// agent and the ground truth) and the last training loss. Unregister the
// returned registration before the cycle goes away.
func (c *Cycle) RegisterMetrics(meter metric.Meter) (metric.Registration, error) {
	runs, err1 := meter.Int64ObservableCounter(metricCycleRuns, metric.WithDescription("AT-GRPO cycles finished (kept across restarts)."))
	lastRun, err2 := meter.Float64ObservableGauge(metricCycleLastRun, metric.WithDescription("Unix time of the last cycle (or failed attempt)."), metric.WithUnit("s"))
	accepted, err3 := meter.Float64ObservableGauge(metricCycleAccepted, metric.WithDescription("1 when the eval gate published the last cycle's candidate, else 0."))
	gate, err4 := meter.Float64ObservableGauge(metricCycleGate, metric.WithDescription("The eval gate's inputs of the last cycle: stat avg_l or avg_r of policy candidate or parent with env ua (user agent) or gt (ground truth)."))
	loss, err5 := meter.Float64ObservableGauge(metricCycleLoss, metric.WithDescription("AT-GRPO loss of the last step of the last cycle."))
	referee, err6 := meter.Float64ObservableGauge(metricCycleReferee, metric.WithDescription("1 when the user agent passed the referee gate as the referee of RL from the serving version, 0 while the cycle waits for one that does."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return nil, err
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c.mu.Lock()
		st := c.state
		c.mu.Unlock()
		o.ObserveInt64(runs, int64(st.Cycles))
		if v := st.Referee; v != nil {
			o.ObserveFloat64(referee, boolFloat(v.Passed), metric.WithAttributes(attribute.String("npc", v.NPC), attribute.String("user_agent", v.UserAgent)))
		}
		if !st.LastAt.IsZero() {
			o.ObserveFloat64(lastRun, float64(st.LastAt.UnixMilli())/1000)
		}
		res := st.Last
		if res == nil {
			return nil
		}
		o.ObserveFloat64(accepted, boolFloat(res.Published))
		for _, p := range []struct {
			policy string
			eval   CycleEval
		}{{"candidate", res.Candidate}, {"parent", res.ParentEval}} {
			for _, v := range []struct {
				env, stat string
				value     float64
			}{
				{"ua", "avg_l", p.eval.UAAvgL}, {"ua", "avg_r", p.eval.UAAvgR},
				{"gt", "avg_l", p.eval.GTAvgL}, {"gt", "avg_r", p.eval.GTAvgR},
			} {
				o.ObserveFloat64(gate, v.value, metric.WithAttributes(attribute.String("policy", p.policy),
					attribute.String("env", v.env), attribute.String("stat", v.stat)))
			}
		}
		o.ObserveFloat64(loss, res.Loss)
		return nil
	}, runs, lastRun, accepted, gate, loss, referee)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
