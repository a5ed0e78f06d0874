//go:build race

package lists

const raceEnabled = true
