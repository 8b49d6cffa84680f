#!/usr/bin/env bash
# Makes the certificates the TLS tests and suites use, in DIR (created): a CA, the broker's
# certificate for 127.0.0.1/localhost in PEM and PKCS12 stores, client certificates for
# alice and bob, one from a CA nobody trusts, an expired one, and a real JKS keystore (to
# check it is refused). Test material only: keys are unencrypted (but for one encrypted copy of
# the broker's) and passwords are fixed.
#
#   scripts/make-test-certs.sh DIR
set -euo pipefail
dir=${1:?usage: make-test-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
[ -f done ] && exit 0

days=3650
ext_server="basicConstraints=CA:FALSE
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:cairn-1,DNS:cairn-2,DNS:cairn-3
extendedKeyUsage=serverAuth,clientAuth"
ext_client="basicConstraints=CA:FALSE
extendedKeyUsage=clientAuth"

ec_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# ca NAME SUBJECT: a self-signed CA.
ca() {
    ec_key "$1.key"
    openssl req -x509 -new -key "$1.key" -subj "$2" -days $days -out "$1.pem" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign"
}

# leaf NAME SUBJECT CA EXTENSIONS [KEYTYPE]: a certificate signed by CA.
leaf() {
    if [ "${5:-ec}" = rsa ]; then
        openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1.key" 2>/dev/null
    else
        ec_key "$1.key"
    fi
    openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
    printf '%s\n' "$4" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial \
        -days $days -sha256 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}

ca ca "/O=Cairn tests/CN=Cairn test CA"
ca rogue-ca "/O=Nobody/CN=Rogue CA"

leaf broker "/O=Cairn tests/CN=localhost" ca "$ext_server" rsa
cat broker.key broker.pem > broker-key-and-chain.pem
# The same key encrypted (PKCS#8, PBES2 with AES-256 and PBKDF2), for ssl.key.password.
openssl pkcs8 -topk8 -v2 aes-256-cbc -in broker.key -passout pass:key-pass -out broker-enc.key
cat broker-enc.key broker.pem > broker-enc-key-and-chain.pem
openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker \
    -passout pass:broker-pass -out broker.p12
# A truststore of the CA alone, as PKCS12, made as operators make one for Java.
keytool -importcert -noprompt -storetype PKCS12 -keystore ca.p12 -storepass trust-pass \
    -alias ca -file ca.pem >/dev/null 2>&1

leaf alice "/O=Cairn/OU=dev/CN=alice" ca "$ext_client"
leaf bob "/O=Cairn/CN=bob" ca "$ext_client"
leaf mallory "/O=Nobody/CN=mallory" rogue-ca "$ext_client"
for u in alice bob mallory; do
    openssl pkcs12 -export -in $u.pem -inkey $u.key -name $u -passout pass:$u-pass -out $u.p12
done

# An expired client certificate: `openssl ca` sets the dates.
mkdir -p expired-ca
: > expired-ca/index.txt
echo 1000 > expired-ca/serial
cat > expired-ca/ca.cnf <<CNF
[ca]
default_ca = d
[d]
dir = expired-ca
database = expired-ca/index.txt
new_certs_dir = expired-ca
serial = expired-ca/serial
default_md = sha256
policy = any
copy_extensions = none
[any]
commonName = supplied
organizationName = optional
CNF
ec_key expired.key
openssl req -new -key expired.key -subj "/O=Cairn/CN=expired" -out expired.csr
printf '%s\n' "$ext_client" > expired.ext
openssl ca -batch -notext -config expired-ca/ca.cnf -cert ca.pem -keyfile ca.key \
    -in expired.csr -extfile expired.ext -startdate 20200101000000Z -enddate 20200102000000Z \
    -out expired.pem 2>/dev/null

# A real JKS keystore, which the broker refuses with the command that converts it.
keytool -genkeypair -storetype JKS -keystore broker.jks -storepass jks-pass -keypass jks-pass \
    -alias broker -keyalg EC -dname "CN=localhost" -validity 30 >/dev/null 2>&1

rm -f ./*.csr ./*.ext ./*.srl
touch done
