// Package verify is the verification pipeline: it turns an address into the verify result that
// clients get (package verdict; docs/api.md) by running five layers in order — syntax,
// disposable, MX, SMTP probe, signals (docs/architecture.md). The first check that fails ends the
// checks; the signals are computed for every syntactically valid address, even one that fails a
// later check, so that a typo'd domain with no MX still gets its suggestion.
//
// One per-address step (Verifier.step) runs the layers and decides every result. Local, Verify
// and VerifyBatch differ only in the network I/O they do for it: none (the API runs Local for
// every address, and answers those that fail a local layer itself), one address's at a time
// (Verify), or many addresses' grouped so that they share MX look-ups and SMTP sessions
// (VerifyBatch, which the verifier workers use for batches and streams).
package verify
