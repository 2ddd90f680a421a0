#!/bin/sh
# make-certs.sh DIR: the X.509 files of the TLS tests, made afresh at test
# time with the openssl CLI (no key is committed). EC P-256, valid for two
# days from now unless said otherwise:
#   ca.pem/key            the test CA (WISP_TLS_CA)
#   server.pem/key        CN localhost, SAN IP:127.0.0.1, IP:::1, DNS:localhost
#   client.pem/key        CN wisp-client (mutual authentication)
#   other.pem/key         SAN DNS:other.example only (name mismatch)
#   expired.pem/key       as server, valid 2020-01-01 to 2020-01-02
#   rogue-ca.pem/key      another CA; rogue.pem/key as server, signed by it
# Idempotent: a DIR with all files is left alone.
set -eu
d=$1
mkdir -p "$d"
cd "$d"
[ -f complete ] && exit 0
umask 077
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {
	key "$1.key"
	openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 2 -out "$1.pem" 2>/dev/null
}
# sign NAME CN SAN CA
sign() {
	key "$1.key"
	openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
	printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\n' "$3" >"$1.ext"
	openssl x509 -req -in "$1.csr" -CA "$4.pem" -CAkey "$4.key" \
		-CAcreateserial -days 2 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}
ca ca wisp-test-ca
ca rogue-ca wisp-rogue-ca
sign server localhost "IP:127.0.0.1,IP:::1,DNS:localhost" ca
sign client wisp-client "DNS:wisp-client" ca
sign other other.example "DNS:other.example" ca
sign rogue localhost "IP:127.0.0.1,IP:::1,DNS:localhost" rogue-ca
# An expired certificate needs explicit dates: openssl ca.
key expired.key
openssl req -new -key expired.key -subj /CN=localhost -out expired.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\n' >expired.ext
: >index.txt
echo 01 >serial
cat >ca.cnf <<CNF
[ca]
default_ca = c
[c]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = p
[p]
commonName = supplied
CNF
openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -notext \
	-extfile expired.ext -startdate 20200101000000Z -enddate 20200102000000Z \
	-in expired.csr -out expired.pem 2>/dev/null
# A PSK file and a wrong one, as scripts/wisp-tls-psk makes them.
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >psk && echo >>psk
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >wrong.psk && echo >>wrong.psk
touch complete
