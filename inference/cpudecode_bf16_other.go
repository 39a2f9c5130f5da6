//go:build !amd64 || purego

package inference

func bf16Dot4x4(w []uint16, x []float32, in int, s *[16]float32) { bf16Dot4x4Go(w, x, in, s) }

func bf16Dot4x1(w []uint16, x []float32, in int, s *[4]float32) { bf16Dot4x1Go(w, x, in, s) }

func bf16Gemv(w []uint16, x []float32, in int, y []float32) { bf16GemvRows(w, x, in, y) }
