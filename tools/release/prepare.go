package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// checkVersion accepts a canonical semantic version vMAJOR.MINOR.PATCH with
// an optional pre-release, and a major version of 0 or 1 (a v2 needs a /v2
// module path).
func checkVersion(v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "" {
		return fmt.Errorf("version %q is not of the form vMAJOR.MINOR.PATCH (e.g. v0.2.0 or v0.2.0-rc.1)", v)
	}
	if m := semver.Major(v); m != "v0" && m != "v1" {
		return fmt.Errorf("version %q: a major version above v1 needs the module path to end in /%s", v, m)
	}
	return nil
}

// prepare makes the release commit and tags in the clone at root: it moves
// the CHANGELOG's Unreleased entries under the version, requires every
// published module of the repository at that version from every module,
// tidies each module, commits, and tags each published module.
func prepare(root, version string, date time.Time) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	if out, err := git(root, "status", "--porcelain"); err != nil {
		return err
	} else if strings.TrimSpace(out) != "" {
		return fmt.Errorf("the work tree at %s has changes; release from a clean clone:\n%s", root, out)
	}
	mods, err := readModules(root)
	if err != nil {
		return err
	}
	var tags []string
	for _, m := range mods {
		if m.Published {
			tags = append(tags, m.tagPrefix()+version)
		}
	}
	for _, t := range tags {
		if out, _ := git(root, "tag", "--list", t); strings.TrimSpace(out) != "" {
			return fmt.Errorf("tag %s exists already", t)
		}
	}
	if err := changelog(filepath.Join(root, "CHANGELOG.md"), version, date); err != nil {
		return err
	}
	published := map[string]bool{}
	for _, m := range mods {
		if m.Published {
			published[m.Path] = true
		}
	}
	if err := checkPublishedRequirements(root, mods); err != nil {
		return err
	}
	for _, m := range mods {
		if err := requireVersion(filepath.Join(root, m.Dir, "go.mod"), published, version); err != nil {
			return err
		}
	}
	for _, m := range mods {
		cmd := exec.Command("go", "mod", "tidy")
		cmd.Dir = filepath.Join(root, m.Dir)
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go mod tidy in %s: %w\n%s", m.Dir, err, out)
		}
	}
	if _, err := git(root, "add", "-A"); err != nil {
		return err
	}
	msg := fmt.Sprintf("Release %s\n\nMove the changelog's unreleased entries under %s and require\n%s of every published module from every module.", version, version, version)
	if _, err := git(root, "commit", "-q", "-m", msg); err != nil {
		return err
	}
	for _, t := range tags {
		if _, err := git(root, "tag", "-a", "-m", "quorumlock "+t, t); err != nil {
			return err
		}
	}
	fmt.Printf("Committed the release and tagged %s.\nPush them with:\n\tgit push origin HEAD %s\n", strings.Join(tags, " "), strings.Join(tags, " "))
	return nil
}

// checkPublishedRequirements refuses a published module that requires an
// unpublished module of the repository: its users could not get that one.
func checkPublishedRequirements(root string, mods []goModule) error {
	unpublished := map[string]bool{}
	for _, m := range mods {
		if !m.Published {
			unpublished[m.Path] = true
		}
	}
	for _, m := range mods {
		if !m.Published {
			continue
		}
		f, err := parseGoMod(filepath.Join(root, m.Dir, "go.mod"))
		if err != nil {
			return err
		}
		for _, r := range f.Require {
			if unpublished[r.Mod.Path] {
				return fmt.Errorf("%s is published but requires %s, which is not (%s): its users could not get it; move what needs it into an unpublished module", m.Path, r.Mod.Path, listFile)
			}
		}
	}
	return nil
}

// parseGoMod reads and parses the go.mod at name.
func parseGoMod(name string) (*modfile.File, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(name, data, nil)
}

// requireVersion sets the requirement on every published module of the
// repository in the go.mod at name to version, keeping its replace
// directives (the go command ignores them for the module's users).
func requireVersion(name string, published map[string]bool, version string) error {
	f, err := parseGoMod(name)
	if err != nil {
		return err
	}
	for _, r := range f.Require {
		if published[r.Mod.Path] {
			if err := f.AddRequire(r.Mod.Path, version); err != nil {
				return err
			}
		}
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(name, out, 0o644)
}

var (
	unreleasedHeading = regexp.MustCompile(`(?m)^## \[Unreleased\][ \t]*\n`)
	unreleasedLink    = regexp.MustCompile(`(?m)^\[Unreleased\]:[ \t]*(\S+)[ \t]*$`)
	versionHeading    = regexp.MustCompile(`(?m)^## \[(v[^\]]+)\]`)
)

// repoURL is where the CHANGELOG's comparison links point.
const repoURL = "https://github.com/quorumlock/quorumlock"

// changelog moves the Unreleased section's entries under a heading for
// version and updates the link definitions at the end of the file.
func changelog(name, version string, date time.Time) error {
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	loc := unreleasedHeading.FindIndex(data)
	if loc == nil {
		return fmt.Errorf("%s has no \"## [Unreleased]\" heading", name)
	}
	if bytes.Contains(data, []byte("## ["+version+"]")) {
		return fmt.Errorf("%s has a section for %s already", name, version)
	}
	prev := ""
	if m := versionHeading.FindSubmatch(data[loc[1]:]); m != nil {
		prev = string(m[1])
	}
	var b bytes.Buffer
	b.Write(data[:loc[1]])
	fmt.Fprintf(&b, "\n## [%s] - %s\n", version, date.Format("2006-01-02"))
	b.Write(data[loc[1]:])
	out := b.Bytes()

	compare := fmt.Sprintf("[%s]: %s/releases/tag/%s", version, repoURL, version)
	if prev != "" {
		compare = fmt.Sprintf("[%s]: %s/compare/%s...%s", version, repoURL, prev, version)
	}
	unrel := fmt.Sprintf("[Unreleased]: %s/compare/%s...HEAD", repoURL, version)
	if m := unreleasedLink.FindIndex(out); m != nil {
		out = append(out[:m[0]:m[0]], append([]byte(unrel+"\n"+compare), out[m[1]:]...)...)
	} else {
		out = append(bytes.TrimRight(out, "\n"), []byte("\n\n"+unrel+"\n"+compare+"\n")...)
	}
	return os.WriteFile(name, out, 0o644)
}

// git runs a git command in dir and returns its standard output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
