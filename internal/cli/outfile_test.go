//go:build unix

package cli

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// An --out in a directory that does not exist is named as given, not by its hidden temporary file.
func TestOutFileErrorNamesThePathGiven(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "results.csv")
	_, err := createOut(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+": ") || strings.Contains(err.Error(), ".part") || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("createOut(%s): %v", path, err)
	}
}

// A new --out file gets the permissions os.Create would give it (0666 less the umask), not a
// fixed 0644: results hold customers' addresses, and a user whose umask is 077 keeps them
// private. An existing file keeps its own. Not parallel: the umask is the process's.
func TestOutFileModes(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	dir := t.TempDir()
	write := func(path string) fs.FileMode {
		t.Helper()
		var before fs.FileMode
		if st, err := os.Stat(path); err == nil {
			before = st.Mode().Perm()
		}
		o, err := createOut(path)
		if err != nil {
			t.Fatal(err)
		}
		// While it is written, the temporary file is no more open than the file it replaces.
		if st, err := o.Stat(); err != nil || before != 0 && st.Mode().Perm()&^before != 0 {
			t.Errorf("the temporary file of a %v file is %v (%v)", before, st.Mode().Perm(), err)
		}
		if _, err := o.WriteString("email,status\n"); err != nil {
			t.Fatal(err)
		}
		if err := o.commit(); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	if m := write(filepath.Join(dir, "new.csv")); m != 0o640 {
		t.Errorf("a new file under umask 027 is %v, want -rw-r-----", m)
	}
	existing := filepath.Join(dir, "old.csv")
	if err := os.WriteFile(existing, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(existing, 0o604); err != nil {
		t.Fatal(err)
	}
	if m := write(existing); m != 0o604 {
		t.Errorf("an existing 0604 file became %v", m)
	}
	if err := os.Chmod(existing, 0o600); err != nil {
		t.Fatal(err)
	}
	if m := write(existing); m != 0o600 {
		t.Errorf("an existing 0600 file became %v", m)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*.part")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
