package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files of a TLS-only server ([Options.TLS]): it
// listens with TLS on its port and not at all without TLS.
type TLSFiles struct {
	CertFile, KeyFile string // the server's certificate and key
	CAFile            string // the CA that clients' certificates must chain to

	// ClientCertFile and ClientKeyFile are a client certificate signed by
	// CAFile's CA; the readiness probe and ClientConfig present it.
	ClientCertFile, ClientKeyFile string

	// AuthClients is redis-server's tls-auth-clients: "yes" (a client must
	// present a certificate), "optional" or "no". Default: "yes".
	AuthClients string
}

// ClientConfig returns a tls.Config that trusts the CA and presents the
// client certificate when there is one.
func (f *TLSFiles) ClientConfig() (*tls.Config, error) {
	ca, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("redistest: no certificate in %s", f.CAFile)
	}
	conf := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if f.ClientCertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

func (f *TLSFiles) args() []string {
	auth := f.AuthClients
	if auth == "" {
		auth = "yes"
	}
	return []string{
		"--tls-cert-file", f.CertFile,
		"--tls-key-file", f.KeyFile,
		"--tls-ca-cert-file", f.CAFile,
		"--tls-auth-clients", auth,
	}
}

// GenerateTLS writes a throwaway CA (ECDSA P-256, valid for a day) and a
// server certificate for 127.0.0.1 and localhost and a client certificate
// signed by it into dir, and returns their files, with AuthClients "yes".
func GenerateTLS(dir string) (*TLSFiles, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	caTmpl := template("redistest CA")
	caTmpl.IsCA, caTmpl.BasicConstraintsValid = true, true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	f := &TLSFiles{CAFile: filepath.Join(dir, "ca.crt"), AuthClients: "yes"}
	if err := writePEM(f.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	server := template("127.0.0.1")
	server.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	server.DNSNames = []string{"localhost"}
	server.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	if f.CertFile, f.KeyFile, err = issue(dir, "server", server, ca, caKey); err != nil {
		return nil, err
	}
	client := template("redistest client")
	client.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if f.ClientCertFile, f.ClientKeyFile, err = issue(dir, "client", client, ca, caKey); err != nil {
		return nil, err
	}
	return f, nil
}

func template(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

// issue makes a key and a certificate for tmpl signed by ca, and writes them
// to dir/name.crt and dir/name.key.
func issue(dir, name string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("redistest: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", fmt.Errorf("redistest: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("redistest: %w", err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writePEM(keyFile, "EC PRIVATE KEY", keyDER)
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}
