package cli

import (
	"crypto/rand"
	"encoding/hex"
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
	mode fs.FileMode // an existing file's permissions, which the new one takes
	keep bool        // mode is set: path existed
	// direct is set for a path that is not a regular file (/dev/stdout, a pipe): it is written
	// as it is, since nothing can be renamed over it.
	direct bool
}

// createOut checks that path can be written, before anything is uploaded or charged, and opens
// the temporary file beside it. An existing file keeps its permissions (a symbolic link stays
// one: its target is replaced); a new one gets those os.Create gives, 0666 less the umask — results
// files hold customers' addresses, and a umask of 077 keeps them the user's own.
func createOut(path string) (*outFile, error) {
	var mode fs.FileMode
	keep := false
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
		mode, keep = st.Mode().Perm(), true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	perm := fs.FileMode(0o666)
	if keep {
		perm = mode // never more open while it is written than the file it replaces
	}
	f, err := createPart(path, perm)
	if err != nil {
		return nil, err
	}
	return &outFile{File: f, path: path, mode: mode, keep: keep}, nil
}

// createPart creates a new temporary file beside path with perm less the umask (os.CreateTemp
// would make it 0600 whatever the umask).
func createPart(path string, perm fs.FileMode) (*os.File, error) {
	for range 100 {
		var b [6]byte
		_, _ = rand.Read(b[:])
		name := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+hex.EncodeToString(b[:])+".part")
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			// Named after the file asked for: the hidden temporary name means nothing to the user.
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil, fmt.Errorf("%s: no free temporary name beside it", path)
}

// commit puts the complete file in place.
func (o *outFile) commit() error {
	if o.direct {
		return o.Close()
	}
	name := o.Name()
	var chmod error
	if o.keep {
		chmod = o.Chmod(o.mode)
	}
	err := errors.Join(o.Sync(), chmod, o.Close())
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
