# Shared by the benchmark scripts (sourced): a self-signed identity for localhost, and a
# 1 KiB GitHub push body with its X-Hub-Signature-256.

# bench_identity DIR: DIR/cert.pem and DIR/key.pem (P-256, valid for localhost and 127.0.0.1).
bench_identity() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
        -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$1/key.pem" -out "$1/cert.pem" 2>/dev/null
}

# bench_body FILE SECRET: writes the body to FILE and prints its signature header value.
bench_body() {
    python3 - "$1" <<'PY'
import json, sys
body = {"ref": "refs/heads/main", "repository": {"full_name": "acme/webhooks"}, "pusher": {"name": "bench"}}
body["padding"] = "x" * (1024 - len(json.dumps({**body, "padding": ""})))
open(sys.argv[1], "w").write(json.dumps(body))
PY
    echo "sha256=$(openssl dgst -sha256 -hmac "$2" < "$1" | awk '{print $NF}')"
}
