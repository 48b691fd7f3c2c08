import { createHash, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SQSClient } from '@aws-sdk/client-sqs';
import type { SQSRecord } from 'aws-lambda';

/**
 * One SQS queue behind a real HTTP server speaking the AWS JSON 1.0 protocol of @aws-sdk/client-sqs, for
 * the calls the import worker makes (SendMessage, ChangeMessageVisibility), with SQS's rules: a delay of
 * at most 900 s, a visibility timeout of at most 12 hours, a receipt handle valid only for the receive
 * that issued it and only while that message is in flight, and the MD5 of the body the SDK checks.
 * (The JSON protocol has no local server here: the npm ones speak the older Query protocol.)
 *
 * The test plays Lambda's event source with receive() and delete(); time is `now()` (milliseconds),
 * which a test may replace to move past a delay or a visibility timeout.
 */
export class FakeSqs {
  readonly messages: Array<{
    messageId: string;
    body: string;
    visibleAt: number;
    receiveCount: number;
    receiptHandle: string | undefined;
  }> = [];
  /** Every call the server received, with the status it answered. */
  readonly calls: Array<{ action: string; input: Record<string, unknown>; status: number }> = [];
  now: () => number = () => Date.now();
  #server: Server | undefined;
  #url = '';

  /** The queue's URL, as the worker is configured with it (IMPORT_QUEUE_URL). */
  get queueUrl(): string {
    return `${this.#url}/123456789012/vps-test-imports`;
  }

  readonly queueArn = 'arn:aws:sqs:eu-west-1:123456789012:vps-test-imports';

  async start(): Promise<void> {
    this.#server = createServer((req, res) => void this.#handle(req, res));
    await new Promise<void>((resolve) => this.#server!.listen(0, '127.0.0.1', resolve));
    this.#url = `http://127.0.0.1:${(this.#server!.address() as AddressInfo).port}`;
  }

  /** An SDK client of this server, as the adapter's tests use it (test credentials). */
  client(): SQSClient {
    return new SQSClient({
      region: 'eu-west-1',
      endpoint: this.#url,
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.#server?.close(() => resolve()));
  }

  /** A message as S3's notification (or anyone) sends it. */
  send(body: string, delaySeconds = 0): string {
    const messageId = randomUUID();
    this.messages.push({
      messageId,
      body,
      visibleAt: this.now() + delaySeconds * 1000,
      receiveCount: 0,
      receiptHandle: undefined,
    });
    return messageId;
  }

  /**
   * What the event source hands the function: the first visible message, now in flight for
   * `visibilitySeconds` (the queue's visibility timeout), as a Lambda SQS record.
   */
  receive(visibilitySeconds = 5400): SQSRecord | undefined {
    const message = this.messages.find((m) => m.visibleAt <= this.now());
    if (!message) return undefined;
    message.receiveCount += 1;
    message.receiptHandle = randomUUID();
    message.visibleAt = this.now() + visibilitySeconds * 1000;
    return {
      messageId: message.messageId,
      receiptHandle: message.receiptHandle,
      body: message.body,
      attributes: {
        ApproximateReceiveCount: String(message.receiveCount),
        SentTimestamp: '0',
        SenderId: 'S3',
        ApproximateFirstReceiveTimestamp: '0',
      },
      messageAttributes: {},
      md5OfBody: createHash('md5').update(message.body).digest('hex'),
      eventSource: 'aws:sqs',
      eventSourceARN: this.queueArn,
      awsRegion: 'eu-west-1',
    };
  }

  /** The event source deletes a message the function did not report as failed. */
  delete(receiptHandle: string): void {
    const at = this.messages.findIndex((m) => m.receiptHandle === receiptHandle);
    if (at >= 0) this.messages.splice(at, 1);
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const target = String(req.headers['x-amz-target'] ?? '');
    const action = target.startsWith('AmazonSQS.') ? target.slice('AmazonSQS.'.length) : target;
    let input: Record<string, unknown> = {};
    const answer = (status: number, payload: unknown, error?: string) => {
      this.calls.push({ action, input, status });
      res.writeHead(status, {
        'content-type': 'application/x-amz-json-1.0',
        ...(error ? { 'x-amzn-query-error': `${error};Sender` } : {}),
      });
      res.end(JSON.stringify(payload));
    };
    // The error's type, and the older Query protocol's code the SDK reads first when there is one.
    const queryCodes: Record<string, string> = {
      QueueDoesNotExist: 'AWS.SimpleQueueService.NonExistentQueue',
      MessageNotInflight: 'AWS.SimpleQueueService.MessageNotInflight',
    };
    const fail = (type: string, message: string) =>
      answer(400, { __type: `com.amazonaws.sqs#${type}`, message }, queryCodes[type] ?? type);
    if (req.method !== 'POST' || req.headers['content-type'] !== 'application/x-amz-json-1.0')
      return fail('InvalidAction', 'Expected a POST of application/x-amz-json-1.0.');
    try {
      input = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
    } catch {
      return fail('InvalidParameterValue', 'The body is not JSON.');
    }
    if (input.QueueUrl !== this.queueUrl)
      return fail('QueueDoesNotExist', 'The specified queue does not exist.');

    if (action === 'SendMessage') {
      const { MessageBody: body, DelaySeconds: delay = 0 } = input as {
        MessageBody?: unknown;
        DelaySeconds?: unknown;
      };
      if (typeof body !== 'string' || body.length === 0)
        return fail('InvalidParameterValue', 'MessageBody must be a non-empty string.');
      if (!Number.isInteger(delay) || (delay as number) < 0 || (delay as number) > 900)
        return fail('InvalidParameterValue', 'DelaySeconds must be between 0 and 900.');
      const messageId = this.send(body, delay as number);
      return answer(200, {
        MessageId: messageId,
        MD5OfMessageBody: createHash('md5').update(body).digest('hex'),
      });
    }
    if (action === 'ChangeMessageVisibility') {
      const { ReceiptHandle: handle, VisibilityTimeout: timeout } = input as {
        ReceiptHandle?: unknown;
        VisibilityTimeout?: unknown;
      };
      if (!Number.isInteger(timeout) || (timeout as number) < 0 || (timeout as number) > 43_200)
        return fail('InvalidParameterValue', 'VisibilityTimeout must be between 0 and 43200.');
      const message = this.messages.find((m) => m.receiptHandle !== undefined && m.receiptHandle === handle);
      if (!message) return fail('ReceiptHandleIsInvalid', 'The receipt handle is not valid.');
      if (message.visibleAt <= this.now())
        return fail('MessageNotInflight', 'The message referred to is not in flight.');
      message.visibleAt = this.now() + (timeout as number) * 1000;
      return answer(200, {});
    }
    return fail('InvalidAction', `The action ${action} is not valid for this endpoint.`);
  }
}
