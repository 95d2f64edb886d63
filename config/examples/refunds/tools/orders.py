"""The refunds example's tools: `lookup` an order, `refund` one.

Arguments arrive as JSON on stdin; the answer is one JSON value on stdout.
A refund names its idempotency key (SA_IDEMPOTENCY_KEY), as a payment
provider would take it, so a repeated call could never pay twice.
"""

import json
import os
import sys


def main() -> None:
    args = json.load(sys.stdin)
    if sys.argv[1] == "lookup":
        print(json.dumps({"order": args["order"], "total": 250.0, "status": "delivered, damaged"}))
    else:
        print(json.dumps({
            "refunded": args["amount"],
            "order": args["order"],
            "idempotency_key": os.environ.get("SA_IDEMPOTENCY_KEY", ""),
        }))


if __name__ == "__main__":
    main()
