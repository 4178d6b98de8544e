//go:build race

package guarantee

const raceEnabled = true
