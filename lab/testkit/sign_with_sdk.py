"""Signs a webhook with its provider's own library and prints the headers it sends, as a
JSON object. Reads {"provider", "secret", "body", "timestamp", "id"} as JSON on stdin.
Run with the venv lab/setup.sh makes (/var/cache/webhook-edge-lab/provider-sdks)."""

import base64
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


def sendgrid(request):
    """SendGrid signs on its side only; its library (`sendgrid`, with `cryptography`)
    verifies. So the signature is made with `cryptography` as SendGrid specifies it
    (ECDSA P-256, SHA-256, DER, base64, over timestamp + payload) and must pass SendGrid's
    own `EventWebhook.verify_signature` before it is used. `secret` is the private
    scalar in hex; `sendgrid-key` prints the verification key a route holds."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from sendgrid.helpers.eventwebhook import EventWebhook

    key = ec.derive_private_key(int(request["secret"], 16), ec.SECP256R1())
    timestamp = str(request["timestamp"])
    signature = base64.b64encode(
        key.sign((timestamp + request["body"]).encode(), ec.ECDSA(hashes.SHA256()))
    ).decode()
    verifier = EventWebhook(sendgrid_key(request)["public-key"])
    assert verifier.verify_signature(request["body"], signature, timestamp)
    return {
        "x-twilio-email-event-webhook-signature": signature,
        "x-twilio-email-event-webhook-timestamp": timestamp,
    }


def sendgrid_key(request):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    public = ec.derive_private_key(int(request["secret"], 16), ec.SECP256R1()).public_key()
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return {"public-key": base64.b64encode(der).decode()}


def paddle(request):
    """Paddle's SDK (`paddle-python-sdk`) only verifies: the header is made as Paddle
    documents it (`ts=<unix>;h1=<HMAC-SHA256 hex of ts:body>`) and must pass the SDK's
    own `PaddleSignature.verify` before it is used."""
    import hashlib
    import hmac

    from paddle_billing.Notifications.PaddleSignature import PaddleSignature
    from paddle_billing.Notifications.Secret import Secret

    timestamp = str(request["timestamp"])
    signed = f"{timestamp}:{request['body']}".encode()
    h1 = hmac.new(request["secret"].encode(), signed, hashlib.sha256).hexdigest()
    header = f"ts={timestamp};h1={h1}"
    assert PaddleSignature().verify(header, request["body"], Secret(request["secret"]))
    return {"paddle-signature": header}


def mailgun(request):
    """Mailgun signs `timestamp + token` and puts all three in the JSON body beside the
    event data (`body` here): the body printed as `signed-body`, its signature made as
    Mailgun documents it and checked by the `mailgun` SDK's own `verify_webhook` first.
    `id` is the delivery's token."""
    import hashlib
    import hmac

    from mailgun.security import SecurityGuard

    timestamp = str(request["timestamp"])
    token = request["id"]
    signature = hmac.new(
        request["secret"].encode(), f"{timestamp}{token}".encode(), hashlib.sha256
    ).hexdigest()
    assert SecurityGuard.verify_webhook(
        request["secret"], token, timestamp, signature, max_age_seconds=0
    )
    signed = {"timestamp": timestamp, "token": token, "signature": signature}
    body = json.dumps({"signature": signed, "event-data": json.loads(request["body"])})
    return {"signed-body": body}


def twilio(request):
    """Twilio's own `RequestValidator`: a form body is signed with its parameters; a JSON
    body (Twilio's newer products) through `bodySHA256=<hex>` added to the URL's query,
    the URL to post to printed as `url`. Each signature must pass the SDK's `validate`."""
    from urllib.parse import parse_qsl

    from twilio.request_validator import RequestValidator

    validator = RequestValidator(request["secret"])
    url, body = request["url"], request["body"]
    if body.startswith("{"):
        separator = "&" if "?" in url else "?"
        url = f"{url}{separator}bodySHA256={validator.compute_hash(body)}"
        signature = validator.compute_signature(url, {})
        assert validator.validate(url, body, signature)
    else:
        params = dict(parse_qsl(body, keep_blank_values=True))
        signature = validator.compute_signature(url, params)
        assert validator.validate(url, params, signature)
    return {"x-twilio-signature": signature, "url": url}


def standard_v1a(request):
    """The Standard Webhooks specification's asymmetric version, which the
    `standardwebhooks` library does not implement: Ed25519 (PyNaCl) over
    `id.timestamp.body`, sent as `v1a,<base64>`; `secret` is the key's seed in hex,
    `standard-v1a-key` prints its `whpk_` public key."""
    from nacl.signing import SigningKey

    key = SigningKey(bytes.fromhex(request["secret"]))
    timestamp = str(request["timestamp"])
    signed = f"{request['id']}.{timestamp}.{request['body']}".encode()
    signature = base64.b64encode(key.sign(signed).signature).decode()
    return {
        "webhook-id": request["id"],
        "webhook-timestamp": timestamp,
        "webhook-signature": f"v1a,{signature}",
    }


def standard_v1a_key(request):
    from nacl.signing import SigningKey

    public = SigningKey(bytes.fromhex(request["secret"])).verify_key.encode()
    return {"public-key": "whpk_" + base64.b64encode(public).decode()}


SIGNERS = {
    "standard": standard,
    "slack": slack,
    "stripe": stripe,
    "discord": discord,
    "discord-key": discord_key,
    "sendgrid": sendgrid,
    "sendgrid-key": sendgrid_key,
    "paddle": paddle,
    "mailgun": mailgun,
    "twilio": twilio,
    "standard-v1a": standard_v1a,
    "standard-v1a-key": standard_v1a_key,
}

if __name__ == "__main__":
    request = json.load(sys.stdin)
    json.dump(SIGNERS[request["provider"]](request), sys.stdout)
