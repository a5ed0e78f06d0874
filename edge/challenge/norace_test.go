//go:build !race

package challenge

const raceEnabled = false
