//go:build race

package calibrate

const raceEnabled = true
