package stripetest

import (
	"net/http"
	"testing"
)

func TestStripeMockAnswers(t *testing.T) {
	base := URL(t)
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/customers/cus_123", nil)
	req.Header.Set("Authorization", "Bearer "+SecretKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET customer: %d", resp.StatusCode)
	}
}
