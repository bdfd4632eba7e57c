package signals

import (
	"testing"

	"github.com/mailvet/mailvet/internal/verify/disposable"
	"github.com/mailvet/mailvet/internal/verify/syntax"
)

// BenchmarkLocalLayers is the cost of everything the API does locally for one typical address:
// layer 1 (Parse), layer 2 (IsDisposable) and the signals of layer 5. The domain is not on any
// list, so Suggest runs sift3 against mailcheck's lists — the slow case.
func BenchmarkLocalLayers(b *testing.B) {
	list, err := disposable.Load("", "")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		a, err := syntax.Parse("Jane.Doe+news@example-corp.com")
		if err != nil {
			b.Fatal(err)
		}
		if list.IsDisposable(a.Domain) || IsRole(a.Local) || IsFreeProvider(a.Domain) || Suggest(a.Domain) != "" {
			b.Fatal("example-corp.com is an ordinary address")
		}
	}
}
