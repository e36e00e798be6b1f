"""Signs a webhook with its provider's own library and prints the headers it sends, as a
JSON object. Reads {"provider", "secret", "body", "timestamp", "id"} as JSON on stdin.
Run with the venv lab/setup.sh makes (/var/cache/webhook-edge-lab/provider-sdks)."""

import datetime
import json
import sys


def standard(request):
    from standardwebhooks.webhooks import Webhook

    at = datetime.datetime.fromtimestamp(request["timestamp"], tz=datetime.timezone.utc)
    signature = Webhook(request["secret"]).sign(request["id"], at, request["body"])
    return {
        "webhook-id": request["id"],
        "webhook-timestamp": str(request["timestamp"]),
        "webhook-signature": signature,
    }


def slack(request):
    from slack_sdk.signature import SignatureVerifier

    timestamp = str(request["timestamp"])
    signature = SignatureVerifier(request["secret"]).generate_signature(
        timestamp=timestamp, body=request["body"]
    )
    return {"x-slack-signature": signature, "x-slack-request-timestamp": timestamp}


def stripe(request):
    from stripe import WebhookSignature

    header = WebhookSignature.generate_signature_header(
        payload=request["body"], secret=request["secret"], timestamp=request["timestamp"]
    )
    return {"stripe-signature": header}


def discord(request):
    """PyNaCl, as Discord's documentation verifies with it; `secret` is the key's seed in
    hex. `discord-key` prints the public key a route holds."""
    from nacl.signing import SigningKey

    key = SigningKey(bytes.fromhex(request["secret"]))
    timestamp = str(request["timestamp"])
    signed = key.sign(timestamp.encode() + request["body"].encode())
    return {"x-signature-ed25519": signed.signature.hex(), "x-signature-timestamp": timestamp}


def discord_key(request):
    from nacl.signing import SigningKey

    return {"public-key": SigningKey(bytes.fromhex(request["secret"])).verify_key.encode().hex()}


SIGNERS = {
    "standard": standard,
    "slack": slack,
    "stripe": stripe,
    "discord": discord,
    "discord-key": discord_key,
}

if __name__ == "__main__":
    request = json.load(sys.stdin)
    json.dump(SIGNERS[request["provider"]](request), sys.stdout)
