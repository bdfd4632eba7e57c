// Package tlstest makes a certificate authority for one test run and a server certificate
// signed by it, so tests can serve real HTTPS on loopback and have clients trust exactly that CA.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// CA is a test certificate authority and a leaf certificate it signed.
type CA struct {
	Pool *x509.CertPool  // trusts only this CA: give it to clients as RootCAs
	PEM  []byte          // the CA certificate as PEM, e.g. for SSL_CERT_FILE
	Leaf tls.Certificate // for the server, valid for host and *.host
}

// New makes a CA valid for a day and a leaf for host and its subdomains.
func New(tb testing.TB, host string) CA {
	tb.Helper()
	fail := func(err error) {
		if err != nil {
			tb.Fatalf("tlstest: %v", err)
		}
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	fail(err)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Mailvet test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	fail(err)
	caCert, err := x509.ParseCertificate(caDER)
	fail(err)

	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	fail(err)
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host, "*." + host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &leafKey.PublicKey, caKey)
	fail(err)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return CA{Pool: pool, PEM: caPEM, Leaf: tls.Certificate{Certificate: [][]byte{leafDER, caDER}, PrivateKey: leafKey}}
}
