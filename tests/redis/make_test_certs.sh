#!/usr/bin/env bash
# Writes the certificates of the TLS tests into directory $1 with openssl req and openssl ca:
#   ca.crt / ca.key            the test CA
#   server.crt / server.key    signed by it, for localhost and 127.0.0.1, valid for 2 days
#   client.crt / client.key    signed by it, a client certificate
#   expired.crt / expired.key  signed by it, for localhost and 127.0.0.1, expired in 2020
#   other-ca.crt               a second CA that signed none of the above
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
: >index.txt
echo 1000 >serial
cat >ca.cnf <<'EOF'
[ca]
default_ca = test_ca
[test_ca]
dir = .
database = ./index.txt
serial = ./serial
new_certs_dir = .
certificate = ./ca.crt
private_key = ./ca.key
default_md = sha256
policy = anything
unique_subject = no
copy_extensions = copy
[anything]
commonName = supplied
[server]
subjectAltName = DNS:localhost,IP:127.0.0.1
extendedKeyUsage = serverAuth
[client]
extendedKeyUsage = clientAuth
EOF
quiet() { "$@" >/dev/null 2>&1 || { echo "make_test_certs: failed: $*" >&2; "$@"; exit 1; }; }
quiet openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=handoff-test-ca
quiet openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=other-ca
sign() {  # name subject extensions [ca options...]
  local name=$1 subject=$2 ext=$3
  shift 3
  quiet openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subject"
  quiet openssl ca -batch -config ca.cnf -extensions "$ext" -in "$name.csr" -out "$name.crt" -notext "$@"
}
sign server /CN=localhost server -days 2
sign client /CN=handoff-test-client client -days 2
sign expired /CN=localhost server -startdate 20200101000000Z -enddate 20200102000000Z
