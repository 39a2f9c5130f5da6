//go:build !xla

package inference

// xlaCompiled reports whether the XLA (PJRT) backend is linked in; build
// with the tag "xla" (cgo) to link it.
const xlaCompiled = false

func prepareXLA() {}
