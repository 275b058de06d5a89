"""The AWS side of tests/destinations/aws.rs, with boto3 against a moto server (PyPI
`moto[server]`) the test started.

  setup ENDPOINT   makes an IAM user with an access key allowed everything, then (signed with
                   that key) a standard and a FIFO queue, an SNS topic whose subscribed queue
                   gets raw messages, and an EventBridge bus whose rule sends every event to a
                   queue; then turns moto's signature checking on. Prints the names and the
                   key as JSON.
  receive ENDPOINT KEY SECRET QUEUE_URL
                   prints, as JSON, every message the queue holds (as a consumer receives it,
                   with all message attributes and system attributes).
  consume ENDPOINT KEY SECRET QUEUE_URL
                   reads and deletes the queue's messages until killed, printing each one's
                   `sent_at_us` (from the payload, or from an EventBridge event's `detail`) on a
                   line of its own: `sluice bench destinations`' consumer.
  ceiling ENDPOINT KEY SECRET KIND TARGET MESSAGES THREADS
                   sends MESSAGES messages shaped like sluice's (a small JSON payload, the
                   Standard Webhooks message attributes) to TARGET (KIND `sqs`: a queue URL,
                   `sns`: a topic ARN, `eventbridge`: a bus) from THREADS threads, one client
                   each, and prints as JSON how many were accepted, refused, and how long they
                   took: what the server takes from a client that is not sluice.
"""

import json
import sys
import threading
import time
import urllib.request

import boto3

REGION = "us-east-1"


def client(service, endpoint, key="testing", secret="testing"):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
    )


def setup(endpoint):
    iam = client("iam", endpoint)
    iam.create_user(UserName="sluice")
    iam.put_user_policy(
        UserName="sluice",
        PolicyName="everything",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
            }
        ),
    )
    key = iam.create_access_key(UserName="sluice")["AccessKey"]
    k, s = key["AccessKeyId"], key["SecretAccessKey"]
    sqs = client("sqs", endpoint, k, s)
    standard = sqs.create_queue(QueueName="orders")["QueueUrl"]
    fifo = sqs.create_queue(
        QueueName="orders.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    from_sns = sqs.create_queue(QueueName="from-sns")["QueueUrl"]
    from_events = sqs.create_queue(QueueName="from-events")["QueueUrl"]
    from_fifo_topic = sqs.create_queue(
        QueueName="from-sns.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    arn = lambda url: sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    sns = client("sns", endpoint, k, s)
    topic = sns.create_topic(Name="orders")["TopicArn"]
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=arn(from_sns),
        Attributes={"RawMessageDelivery": "true"},
    )
    fifo_topic = sns.create_topic(
        Name="orders.fifo", Attributes={"FifoTopic": "true"}
    )["TopicArn"]
    sns.subscribe(
        TopicArn=fifo_topic,
        Protocol="sqs",
        Endpoint=arn(from_fifo_topic),
        Attributes={"RawMessageDelivery": "true"},
    )
    events = client("events", endpoint, k, s)
    events.create_event_bus(Name="orders")
    events.put_rule(
        Name="everything",
        EventBusName="orders",
        EventPattern=json.dumps({"source": [{"prefix": ""}]}),
    )
    events.put_targets(
        Rule="everything",
        EventBusName="orders",
        Targets=[{"Id": "queue", "Arn": arn(from_events)}],
    )
    # From here on moto checks every request's signature and key.
    urllib.request.urlopen(
        urllib.request.Request(
            endpoint + "/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
    ).read()
    print(
        json.dumps(
            {
                "access_key_id": k,
                "secret_access_key": s,
                "standard": standard,
                "fifo": fifo,
                "from_sns": from_sns,
                "from_events": from_events,
                "topic": topic,
                "fifo_topic": fifo_topic,
                "from_fifo_topic": from_fifo_topic,
                "bus": "orders",
            }
        )
    )


def receive(endpoint, key, secret, queue_url):
    sqs = client("sqs", endpoint, key, secret)
    got = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        AttributeNames=["All"],
        WaitTimeSeconds=0,
    ).get("Messages", [])
    out = []
    for m in got:
        out.append(
            {
                "body": m["Body"],
                "attributes": {
                    name: v.get("StringValue")
                    for name, v in m.get("MessageAttributes", {}).items()
                },
                "system": m.get("Attributes", {}),
            }
        )
    print(json.dumps(out))


def consume(endpoint, key, secret, queue_url):
    sqs = client("sqs", endpoint, key, secret)
    while True:
        got = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
        ).get("Messages", [])
        if got:
            sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                    for n, m in enumerate(got)
                ],
            )
        for m in got:
            body = json.loads(m["Body"])
            if isinstance(body, dict) and "detail-type" in body:
                body = body["detail"]
            print(body.get("sent_at_us", 0) if isinstance(body, dict) else 0, flush=True)


def count(endpoint, key, secret, queue_url):
    sqs = client("sqs", endpoint, key, secret)
    a = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    print(int(a["ApproximateNumberOfMessages"]) + int(a["ApproximateNumberOfMessagesNotVisible"]))


def drain(endpoint, key, secret, queue_url):
    """Receive and delete until the queue is empty: the bodies and ids in the order received."""
    sqs = client("sqs", endpoint, key, secret)
    out = []
    while True:
        got = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not got:
            break
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                for n, m in enumerate(got)
            ],
        )
        for m in got:
            attributes = m.get("MessageAttributes", {})
            out.append(
                {
                    "body": m["Body"],
                    "webhook-id": attributes.get("webhook-id", {}).get("StringValue"),
                }
            )
    print(json.dumps(out))


def ceiling(endpoint, key, secret, kind, target, messages, threads):
    messages, threads = int(messages), max(1, int(threads))
    service = {"sqs": "sqs", "sns": "sns", "eventbridge": "events"}[kind]
    # One client per thread, made here: making clients is not thread-safe, using one is.
    clients = [client(service, endpoint, key, secret) for _ in range(threads)]
    attributes = {
        name: {"DataType": "String", "StringValue": value}
        for name, value in [
            ("webhook-id", "msg_ceiling"),
            ("webhook-timestamp", str(int(time.time()))),
            ("webhook-signature", "v1,c2lnbmF0dXJlLW9mLXRoZS1jZWlsaW5nLXJ1bg=="),
            ("webhook-event-type", "e.0"),
        ]
    }

    def send(c, seq):
        payload = json.dumps({"sent_at_us": 0, "seq": seq}, separators=(",", ":"))
        if kind == "sqs":
            c.send_message(QueueUrl=target, MessageBody=payload, MessageAttributes=attributes)
        elif kind == "sns":
            c.publish(TopicArn=target, Message=payload, MessageAttributes=attributes)
        else:
            got = c.put_events(
                Entries=[
                    {
                        "EventBusName": target,
                        "Source": "sluice",
                        "DetailType": "e.0",
                        "Detail": payload,
                    }
                ]
            )
            if got.get("FailedEntryCount", 0):
                raise RuntimeError("a failed entry")

    lock = threading.Lock()
    counts = {"next": 0, "accepted": 0, "refused": 0}

    def work(c):
        while True:
            with lock:
                seq = counts["next"]
                if seq >= messages:
                    return
                counts["next"] += 1
            try:
                send(c, seq)
                ok = "accepted"
            except Exception:
                ok = "refused"
            with lock:
                counts[ok] += 1

    started = time.monotonic()
    workers = [threading.Thread(target=work, args=(c,)) for c in clients]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.monotonic() - started
    print(
        json.dumps(
            {
                "accepted": counts["accepted"],
                "refused": counts["refused"],
                "seconds": seconds,
                "threads": threads,
            }
        )
    )


if __name__ == "__main__":
    command = {
        "setup": setup,
        "receive": receive,
        "consume": consume,
        "count": count,
        "drain": drain,
        "ceiling": ceiling,
    }[sys.argv[1]]
    command(*sys.argv[2:])
