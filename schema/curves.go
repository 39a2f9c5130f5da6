package schema

// CurvesFile is the name of a version's training curves in its registry
// directory. Like every file of a version it is listed, with its sha256, in
// the manifest. The learner writes it; the dashboard draws it.
const CurvesFile = "curves.json"

// Curves are the training curves of one model version, as the trainer
// recorded them: one series per measured quantity over a common x axis.
type Curves struct {
	Model   string `json:"model"`
	Version string `json:"version"`
	// X names the x axis, such as "step".
	X      string        `json:"x"`
	Series []CurveSeries `json:"series"`
}

// CurveSeries is one curve, such as "loss" or "avg_l", in the order of X.
type CurveSeries struct {
	Name   string       `json:"name"`
	Points []CurvePoint `json:"points"`
}

// CurvePoint is one point of a CurveSeries.
type CurvePoint struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}
