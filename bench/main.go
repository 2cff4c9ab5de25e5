// Command bench runs quorumlock and the peers users would otherwise pick
// (go-redsync v4 on redigo pools, bsm/redislock on go-redis) through the
// same workloads, on the same masters, in one process, and prints a
// markdown table with quorumlock's ratio to each peer. With -out it also
// writes the report (table, command, machine) to a file.
//
// It lives in a module of its own so that the peers never enter the
// library's dependencies.
//
//	go run . -workloads handoff,sequential -duration 3s -out ../docs/benchmarks.md
//	go run . -quick   # only what the performance targets are judged on, about a minute
//
// The report ends with the targets, each met or not met with this run's
// ratio; -cpuprofile and -memprofile profile the whole run.
//
// Without -masters it starts seven throwaway redis-server processes on
// 127.0.0.1 (redis-server must be installed).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/masters"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

func main() {
	log.SetFlags(0)
	if len(os.Args) == 2 && os.Args[1] == spinFlag {
		spin()
	}
	mastersFlag := flag.String("masters", os.Getenv(masters.Env), "comma-separated host:port of at least 7 masters (default: start local redis-server processes)")
	workloads := flag.String("workloads", fullWorkloads, "comma-separated workloads: "+strings.Join(workloadNames(), ", "))
	duration := flag.Duration("duration", 3*time.Second, "how long each cell runs")
	out := flag.String("out", "", "write the report to this markdown file")
	hungCell := flag.Duration("hung-cell", 10*time.Second, "how long each cell of the degraded workload runs (shorter only for quick runs)")
	freshCell := flag.Duration("fresh-cell", 5*time.Second, "how long each cell of the fresh workload runs")
	contentionCell := flag.Duration("contention-cell", 5*time.Second, "how long each cell of clients contending for one key runs (handoff, turns; with -quick, -duration unless given)")
	quick := flag.Bool("quick", false, "only the workloads the targets are judged on, fewer cells, and 1s cells unless -duration says otherwise (about a minute)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memProfile := flag.String("memprofile", "", "write an allocation profile at the end of the run to this file")
	only := flag.String("libs", "", "comma-separated libraries to run, by exact name (default: every one); the targets then judge only those")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			*duration = time.Second
		}
		if !set["workloads"] {
			*workloads = quickWorkloads
		}
		if !set["contention-cell"] {
			*contentionCell = *duration
		}
	}
	if *only != "" {
		if err := keepLibs(masters.Split(*only)); err != nil {
			log.Fatal(err)
		}
	}
	// The run, in a function of its own: its deferred clean-up (profiles,
	// masters) runs before log.Fatal exits.
	err := func() (err error) {
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		if *memProfile != "" {
			runtime.MemProfileRate = 4096
			defer func() {
				if perr := writeAllocs(*memProfile); perr != nil && err == nil {
					err = perr
				}
			}()
		}

		addrs := masters.Split(*mastersFlag)
		var servers []*redistest.Server
		if len(addrs) == 0 {
			var stop func()
			var err error
			servers, stop, err = redistest.LaunchServers(7)
			if err != nil {
				return err
			}
			defer stop()
			for _, s := range servers {
				addrs = append(addrs, s.Addr())
			}
		}
		if len(addrs) < 7 {
			return fmt.Errorf("bench: %d masters given, the workloads need 7", len(addrs))
		}
		env := &env{addrs: addrs, servers: servers, duration: *duration, hungCell: *hungCell, freshCell: *freshCell, contentionCell: *contentionCell, quick: *quick,
			metrics: map[string]float64{}, errs: &errorLog{}}
		defer env.close()

		var report strings.Builder
		began := time.Now()
		for _, name := range masters.Split(*workloads) {
			w, ok := registry[name]
			if !ok {
				return fmt.Errorf("bench: unknown workload %q (have %s)", name, strings.Join(workloadNames(), ", "))
			}
			log.Printf("running %s ... (%v since the start)", name, time.Since(began).Round(time.Second))
			section := w(context.Background(), env)
			fmt.Print(section)
			report.WriteString(section)
		}
		log.Printf("all workloads done in %v", time.Since(began).Round(time.Second))
		errs := env.errs.section(env.metrics)
		fmt.Print(errs)
		report.WriteString(errs)
		targets := targetsSection(env.metrics)
		fmt.Print(targets)
		report.WriteString(targets)
		if *out != "" {
			svgPath := strings.TrimSuffix(*out, ".md") + ".svg"
			if svg := plot(env.metrics); svg != "" {
				if err := os.WriteFile(svgPath, []byte(svg), 0o644); err != nil {
					return err
				}
				report.WriteString("## Plot\n\n![p50 latency by number of masters, and throughput by number of clients](" +
					filepath.Base(svgPath) + ")\n\n")
				log.Printf("wrote %s", svgPath)
			}
			if err := os.WriteFile(*out, []byte(document(report.String(), os.Args[1:])+keptTail(*out)), 0o644); err != nil {
				return err
			}
			log.Printf("wrote %s", *out)
		}
		if n, cells := env.errs.total(); n > 0 {
			return fmt.Errorf("bench: %d errors in %d of quorumlock's cells (every master was up): see \"Errors\"", n, cells)
		}
		return nil
	}()
	if err != nil {
		log.Fatal(err)
	}
}

type workload func(ctx context.Context, e *env) string

// fullWorkloads is what `make bench-peers` runs; quickWorkloads only
// what the targets are judged on (the hung-master targets excepted). The
// ceiling comes right before the parallel cells it is judged beside.
const (
	fullWorkloads  = "ceiling,parallel,sequential,scale,handoff,turns,handoffdiag,expiry,allocs,loaded,fresh,degraded"
	quickWorkloads = "ceiling,parallel,sequential,handoff,turns,expiry,allocs,loaded,fresh"
)

var registry = map[string]workload{
	"ceiling":     ceiling,
	"handoffdiag": handoffDiag,
	"loaded":      loaded,
	"sequential":  sequential,
	"parallel":    parallel,
	"degraded":    degraded,
	"fresh":       fresh,
	"allocs":      allocs,
	"scale":       scale,
	"handoff":     handoff,
	"expiry":      expiry,
	"turns":       turns,
}

func workloadNames() []string {
	var names []string
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// document wraps the tables with the command and the machine.
func document(tables string, args []string) string {
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("Measured by `bench/` (its own Go module, so the peers never enter the library's dependencies): " +
		"every library runs the same workloads against the same local `redis-server` masters, in one process, one after another. " +
		"In the tables of 64 clients, of one client and of scale, the libraries of a row group take turns: each is warmed up first (not counted), " +
		"then runs a quarter of the cell's duration per turn, four turns in an order that rotates, so that a passing load on the machine weighs on all of them alike. " +
		"Numbers on this shared 2-core machine are noisy: read the ratios, measured side by side in one run, not the absolute times.\n\n")
	fmt.Fprintf(&b, "Command: `cd bench && go run . %s`\n\n", strings.Join(args, " "))
	fmt.Fprintf(&b, "Machine: %s, %d cores, %s, %s, generated %s.\n\n", cpuModel(), runtime.NumCPU(),
		runtime.Version(), redisVersion(), time.Now().UTC().Format("2006-01-02"))
	b.WriteString(tables)
	return b.String()
}

// keptMarker starts the part of the report file that is written by hand
// (measurements made outside this program, such as the otel observer's
// cost): a new report keeps it.
const keptMarker = "<!-- Below: written by hand, kept when bench rewrites this file. -->"

// keptTail returns the hand-written part of the report at path, from
// keptMarker on, or "".
func keptTail(path string) string {
	old, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if i := strings.Index(string(old), keptMarker); i >= 0 {
		return "\n" + string(old[i:])
	}
	return ""
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(data), "\n") {
		if name, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
		}
	}
	return runtime.GOARCH
}

func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "redis-server (version unknown)"
	}
	f := strings.Fields(string(out))
	for _, w := range f {
		if v, ok := strings.CutPrefix(w, "v="); ok {
			return "redis-server " + v
		}
	}
	return strings.TrimSpace(string(out))
}

// writeAllocs writes the allocation profile to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

// keepLibs leaves in libs only those named.
func keepLibs(names []string) error {
	var kept []lib
	for _, name := range names {
		i := slices.IndexFunc(libs, func(l lib) bool { return l.name == name })
		if i < 0 {
			have := make([]string, len(libs))
			for j, l := range libs {
				have[j] = l.name
			}
			return fmt.Errorf("bench: unknown library %q (have %s)", name, strings.Join(have, ", "))
		}
		kept = append(kept, libs[i])
	}
	libs = kept
	return nil
}
