package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// outFile is an --out file written whole or not at all (docs/clients.md, "Files"): the results go
// to a temporary file next to it, renamed over it only when every row is in. A command that
// fails — a refused upload, a list that ends canceled, a download cut off — leaves a file the
// user already had as it was, instead of truncating a previous run's results.
type outFile struct {
	*os.File
	path string
	mode fs.FileMode
	// direct is set for a path that is not a regular file (/dev/stdout, a pipe): it is written
	// as it is, since nothing can be renamed over it.
	direct bool
}

// createOut checks that path can be written, before anything is uploaded or charged, and opens
// the temporary file beside it. An existing file keeps its permissions (a symbolic link stays
// one: its target is replaced); a new one is 0644.
func createOut(path string) (*outFile, error) {
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		// Opened without truncation: for a regular file only to know that writing it is allowed.
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			return &outFile{File: f, path: path, direct: true}, nil
		}
		f.Close()
		if path, err = filepath.EvalSymlinks(path); err != nil {
			return nil, err
		}
		mode = st.Mode().Perm()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.part")
	if err != nil {
		return nil, err
	}
	return &outFile{File: f, path: path, mode: mode}, nil
}

// commit puts the complete file in place.
func (o *outFile) commit() error {
	if o.direct {
		return o.Close()
	}
	name := o.Name()
	err := errors.Join(o.Sync(), o.Chmod(o.mode), o.Close())
	if err == nil {
		err = os.Rename(name, o.path)
	}
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("%s: %w", o.path, err)
	}
	return nil
}

// discard removes the temporary file; after commit it does nothing.
func (o *outFile) discard() {
	if o.Close() == nil && !o.direct {
		os.Remove(o.Name())
	}
}
