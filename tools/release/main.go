// Command release makes and checks releases of the repository's modules:
//
//	release modules [-published] [-root DIR]      the module directories, root first
//	release prepare -version vX.Y.Z [-root DIR]   the release commit and tags, in a clean clone
//	release proxy -version vX.Y.Z -out DIR        a file module proxy from those tags
//	release check [-version v0.99.0] [-keep]      a scratch release and its first users
//	release oldest [-root DIR]                    each published module and the oldest Go it promises
//
// The Makefile's release-prepare and release-check targets run it; see
// docs/versioning.md. It is a tool of this repository, not a published
// module.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	root := fs.String("root", "../..", "the repository's root")
	version := fs.String("version", "", "the version, vX.Y.Z")
	published := fs.Bool("published", false, "modules: only the published ones")
	out := fs.String("out", "", "proxy: the directory to write")
	keep := fs.Bool("keep", false, "check: keep the scratch directory")
	_ = fs.Parse(os.Args[2:])
	r, err := filepath.Abs(*root)
	if err != nil {
		fail(err)
	}
	switch os.Args[1] {
	case "modules":
		mods, err := readModules(r)
		if err != nil {
			fail(err)
		}
		for _, m := range mods {
			if m.Published || !*published {
				fmt.Println(m.Dir)
			}
		}
	case "oldest":
		mods, err := readModules(r)
		if err != nil {
			fail(err)
		}
		for _, m := range mods {
			if !m.Published {
				continue
			}
			line, err := goVersion(filepath.Join(r, m.Dir, "go.mod"))
			if err != nil {
				fail(err)
			}
			tc, err := newestPatch(line)
			if err != nil {
				fail(err)
			}
			fmt.Println(m.Dir, tc)
		}
	case "prepare":
		err = prepare(r, *version, time.Now().UTC())
	case "proxy":
		if *out == "" {
			fail(fmt.Errorf("proxy: -out is required"))
		}
		err = buildProxy(r, *version, *out)
	case "check":
		v := *version
		if v == "" {
			v = "v0.99.0"
		}
		err = checkRelease(r, v, *keep)
	default:
		usage()
	}
	if err != nil {
		fail(err)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: release modules|prepare|proxy|check [flags] (see the package doc)")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}
