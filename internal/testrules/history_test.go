package testrules_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// historyMarks are the marks of a change's history: this project's issue
// numbers, attack and review rounds, and commit hashes. They belong in
// commit messages; code, comments and docs say how things work
// (CONTRIBUTING.md, "Comments and history"). An upstream issue is named
// with its project and a '#' ("libfaketime issue #130"), which is not
// matched.
var historyMarks = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bissues? \d+`),
	regexp.MustCompile(`(?i)\b(attack|atk|review)[ -]?\d+[a-z]?\b`),
	regexp.MustCompile(`(?i)\b(review|attack) of [0-9a-f]{7,12}\b`),
	// A commit hash: 7 to 12 hex digits with a letter and a digit among
	// them, in parentheses or after a word that dates something.
	regexp.MustCompile(`(?i)(\(|\b(before|after|as of|since|in|on|commit|revert) )(?:[0-9a-f]*[a-f][0-9a-f]*[0-9][0-9a-f]*|[0-9a-f]*[0-9][0-9a-f]*[a-f][0-9a-f]*)[,;:)\s]`),
}

// hexWord keeps the commit-hash rule to words of 7 to 12 characters.
var hexWord = regexp.MustCompile(`\b[0-9a-fA-F]{7,12}\b`)

// historyIn returns "file:line: text" for every line of the Go files and
// Markdown pages under root (testdata, hidden directories, the CHANGELOG
// and this file excluded) that carries a mark of history.
func historyIn(t *testing.T, root string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && skippedDir(name) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, ".md") || name == "CHANGELOG.md" ||
			strings.HasSuffix(filepath.ToSlash(p), "internal/testrules/history_test.go") {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		s.Buffer(nil, 1<<20)
		for n := 1; s.Scan(); n++ {
			if line := s.Text(); hasHistory(line) {
				rel, _ := filepath.Rel(root, p)
				found = append(found, filepath.ToSlash(rel)+":"+strconv.Itoa(n)+": "+strings.TrimSpace(line))
			}
		}
		return s.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// hasHistory reports whether line carries a mark of history.
func hasHistory(line string) bool {
	for i, re := range historyMarks {
		if i == len(historyMarks)-1 {
			for _, m := range re.FindAllString(line, -1) {
				if hexWord.MatchString(m) {
					return true
				}
			}
			continue
		}
		if re.MatchString(line) {
			return true
		}
	}
	return false
}

// No Go file or Markdown page (but the CHANGELOG) names an issue number,
// an attack or review round, or a commit hash.
func TestHistory_codeAndDocsCarryNoIssueRoundOrCommit(t *testing.T) {
	for _, l := range historyIn(t, findRoot(t)) {
		t.Errorf("%s\n\tsay how it works; the history goes in the commit message (CONTRIBUTING.md)", l)
	}
}

// The check finds each kind of mark in a planted file and passes the
// lines that only look like one.
func TestHistory_checkFindsPlantedMarks(t *testing.T) {
	got := historyIn(t, plantedTree(t))
	want := []string{
		"history_test.go:3: // Found in attack27 (review of a45e6a9), fixed for issue 18.",
		"history_test.go:4: // The guard sets deadlines lazily (9aac332).",
		"history_test.go:5: // These failed as of 9692045 and before 7252de9 the pool's did.",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
