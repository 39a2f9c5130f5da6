//go:build xla

package inference

import (
	"github.com/gomlx/gomlx/backends/xla"
)

// xlaCompiled reports whether the XLA (PJRT) backend is linked in; it is
// with the build tag "xla", which needs cgo.
const xlaCompiled = true

// prepareXLA turns off GoMLX's automatic plugin download: the plugin is
// always given by path.
func prepareXLA() { xla.EnableAutoInstall(false) }
