package ipmi

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzCheckTarget checks the whole check of a node's BMC target before ipmitool is run: the
// address annotation, the Secret's credentials and the cipher suite. An accepted target has a
// username that cannot pass for a flag, a password, and a cipher suite from 0 to 255; a refused
// one says why, gives no host or port, and its message does not depend on the password.
func FuzzCheckTarget(f *testing.F) {
	f.Add("10.0.0.5:623", "admin", "s3cret", "")
	f.Add("bmc.rack7", "admin", "s3cret", "17")
	f.Add("10.0.0.5", "-Hevil", "s3cret", "3")
	f.Add("10.0.0.5", "", "", "")
	f.Add("10.0.0.5", "admin", "", "256")
	f.Add("10.0.0.5", "admin", "pw", "-1")
	f.Add("10.0.0.5", "admin", "pw", "0x3")
	f.Fuzz(func(t *testing.T, addr, user, password, cipher string) {
		p := &Provider{}
		tg := Target{Node: "n1", Address: addr, Username: user, Password: password, CipherSuite: cipher}
		host, port, err := p.check(tg)
		if err != nil {
			if err.Error() == "" || host != "" || port != "" {
				t.Fatalf("check(%q) refused with %q, %q, %q", addr, host, port, err)
			}
			other := tg
			other.Password = "another password"
			if _, _, err2 := p.check(other); password != "" && (err2 == nil || err2.Error() != err.Error()) {
				t.Fatalf("check's error depends on the password: %q, with another %v", err, err2)
			}
			return
		}
		if user == "" || password == "" || strings.HasPrefix(user, "-") {
			t.Fatalf("check accepted username %q, password set %v", user, password != "")
		}
		if cipher != "" {
			if n, err := strconv.Atoi(cipher); err != nil || n < 0 || n > 255 {
				t.Fatalf("check accepted cipher suite %q", cipher)
			}
		}
	})
}
