package seglog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

const crashEnv = "SEGLOG_CRASH_DIR"

// crashPayload is the payload of the crash test's record at first: its
// content and size follow from the offset, so that a reader can check it.
// It is cheap to make, so that the child is soon writing after it prints an
// acknowledgement, which is when the parent kills it.
func crashPayload(first uint64) []byte {
	p := make([]byte, int(first*2654435761%(64<<10)))
	x := first*0x9E3779B97F4A7C15 + 1
	for i := 0; i+8 <= len(p); i += 8 {
		x += 0x9E3779B97F4A7C15
		le.PutUint64(p[i:], x)
	}
	return p
}

// TestCrashWriterHelper is the child process of TestCrash: it appends
// batches under SyncEveryBatch and prints each acknowledged batch until it
// is killed.
func TestCrashWriterHelper(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("the child process of TestCrash")
	}
	l, err := Open(dir, Options{SegmentBytes: 256 << 10, Sync: SyncPolicy{Mode: SyncEveryBatch}})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	out := make([]byte, 0, 64)
	for i := 0; ; i++ {
		next := l.NextOffset() // the only writer: Append will start here
		var batch []Record
		for j := range 1 + i%4 {
			count := uint32(1 + (i*7+j)%50)
			batch = append(batch, Record{Count: count, MinTime: t0, MaxTime: t0, Codec: 2, Payload: crashPayload(next)})
			next += uint64(count)
		}
		first, err := l.Append(batch...)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		out = append(out[:0], "ack "...)
		out = strconv.AppendUint(out, first, 10)
		out = append(out, ' ')
		out = strconv.AppendUint(out, next-first, 10)
		out = append(out, '\n')
		os.Stdout.Write(out)
	}
}

// TestCrash kills a real writer process with SIGKILL in mid-stream, several
// times, and checks after each that every acknowledged event is in the log
// exactly once, at contiguous offsets, that a torn tail is gone, and that
// the log takes appends again.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	var acks [][2]uint64 // first, count
	torn := 0
	for round := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWriterHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnv+"="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 64)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// Wait for the acknowledgements with a bound, not a sleep.
		deadline := time.NewTimer(2 * time.Minute)
		want := 150 + 30*round
		got, killed := 0, false
		for done := false; !done; {
			select {
			case line, ok := <-lines:
				if !ok {
					done = true
					break
				}
				if f, c, ok := parseAck(line); ok {
					acks = append(acks, [2]uint64{f, c})
					got++
				} else if strings.HasPrefix(line, "error") {
					t.Errorf("child: %s", line)
				}
				if got == want && !killed {
					// Acknowledgements printed before it dies still count.
					if err := cmd.Process.Kill(); err != nil {
						t.Fatal(err)
					}
					killed = true
				}
			case <-deadline.C:
				cmd.Process.Kill()
				t.Fatalf("round %d: %d acknowledgements in 2 minutes; stderr:\n%s", round, got, stderr.String())
			}
		}
		deadline.Stop()
		err = cmd.Wait()
		if !killed {
			t.Fatalf("round %d: child exited by itself (%v) after %d acknowledgements; stderr:\n%s", round, err, got, stderr.String())
		}
		var tornHere bool
		acks, tornHere = checkCrashLog(t, dir, acks, round)
		if tornHere {
			torn++
		}
	}
	t.Logf("torn tails found in %d of 6 rounds", torn)
}

func parseAck(line string) (first, count uint64, ok bool) {
	f, c, found := strings.Cut(strings.TrimPrefix(line, "ack "), " ")
	if !found || !strings.HasPrefix(line, "ack ") {
		return 0, 0, false
	}
	first, err1 := strconv.ParseUint(f, 10, 64)
	count, err2 := strconv.ParseUint(c, 10, 64)
	return first, count, err1 == nil && err2 == nil
}

// checkCrashLog reopens the log after a kill and checks it; it appends a
// batch of its own, which it returns among the acknowledgements.
func checkCrashLog(t *testing.T, dir string, acks [][2]uint64, round int) ([][2]uint64, bool) {
	t.Helper()
	var problems []Problem
	l, err := Open(dir, Options{SegmentBytes: 256 << 10, Sync: SyncPolicy{Mode: SyncEveryBatch}, Report: func(p Problem) { problems = append(problems, p) }})
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer l.Close()
	for _, p := range problems {
		if !errors.Is(p, ErrTornTail) {
			t.Errorf("round %d: problem other than a torn tail: %v", round, p)
		}
	}
	segs := segFiles(t, dir)
	last := segs[len(segs)-1].path
	fr := framesOf(t, last)
	end := int64(headerLen)
	if len(fr) > 0 {
		end = fr[len(fr)-1].end
	}
	if fi, _ := os.Stat(last); fi.Size() != end {
		t.Errorf("round %d: last segment of %d bytes, its records end at %d: the torn tail is still there", round, fi.Size(), end)
	}

	// Every record at contiguous offsets, with the payload its offset says.
	starts := make(map[uint64]bool)
	r := mustReader(t)(l.Reader(0))
	next := uint64(0)
	for {
		rec, err := r.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if rec.FirstOffset != next {
			t.Fatalf("round %d: record at %d, want %d", round, rec.FirstOffset, next)
		}
		if string(rec.Payload) != string(crashPayload(rec.FirstOffset)) && rec.Codec == 2 {
			t.Fatalf("round %d: record at %d: wrong payload", round, rec.FirstOffset)
		}
		starts[rec.FirstOffset] = true
		next += uint64(rec.Count)
	}
	if next != l.NextOffset() || len(r.Problems()) != 0 {
		t.Errorf("round %d: read to %d, next offset %d; problems %v", round, next, l.NextOffset(), r.Problems())
	}
	for _, a := range acks {
		if !starts[a[0]] || a[0]+a[1] > next {
			t.Fatalf("round %d: acknowledged batch at %d of %d events lost (log ends at %d)", round, a[0], a[1], next)
		}
	}
	t.Logf("round %d: %d acknowledged batches, log of %d events in %d segments, problems %v", round, len(acks), next, len(segs), problems)

	// The log takes appends again, after what survived.
	rec := Record{Count: 3, MinTime: t0, MaxTime: t0, Codec: 3, Payload: []byte("parent")}
	first, err := l.Append(rec, rec)
	if err != nil || first != next {
		t.Fatalf("round %d: append at %d: %v, want %d", round, first, err, next)
	}
	got := readAll(t, r)
	if len(got) != 2 || got[0].FirstOffset != next || got[1].FirstOffset != next+3 || string(got[1].Payload) != "parent" {
		t.Errorf("round %d: read back %+v", round, got)
	}
	return append(acks, [2]uint64{first, 6}), len(problems) > 0
}
