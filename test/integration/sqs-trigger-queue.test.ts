import type { SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SqsTriggerQueue } from '#lib/adapters/sqs-trigger-queue.ts';
import { FakeSqs } from '../support/fake-sqs.ts';

describe('SqsTriggerQueue (SQS JSON protocol)', () => {
  const sqs = new FakeSqs();
  let queue: SqsTriggerQueue;
  let client: SQSClient;
  let time = 1_000_000;

  beforeAll(async () => {
    await sqs.start();
    sqs.now = () => time;
    client = sqs.client();
    queue = new SqsTriggerQueue(client, sqs.queueUrl);
  });
  afterAll(async () => {
    client.destroy();
    await sqs.stop();
  });
  beforeEach(() => {
    sqs.messages.length = 0;
  });

  it('shows a received message again after the given seconds', async () => {
    // Prepare: a message in flight for the queue's 90 minutes
    sqs.send('{"feedId":"shop","importId":"imp_1"}');
    const received = sqs.receive()!;
    // Act
    await queue.retryIn(received.receiptHandle, 30);
    // Assess: invisible for 30 s, then received again (its second receive)
    time += 29_000;
    expect(sqs.receive()).toBeUndefined();
    time += 1_000;
    const again = sqs.receive()!;
    expect(again.messageId).toBe(received.messageId);
    expect(again.attributes.ApproximateReceiveCount).toBe('2');
    sqs.delete(again.receiptHandle);
  });

  it('sends a new message delivered after the given seconds', async () => {
    await queue.sendIn('{"feedId":"shop","importId":"imp_2"}', 60);
    time += 59_000;
    expect(sqs.receive()).toBeUndefined();
    time += 1_000;
    const delivered = sqs.receive()!;
    expect(delivered.body).toBe('{"feedId":"shop","importId":"imp_2"}');
    expect(delivered.attributes.ApproximateReceiveCount).toBe('1');
    sqs.delete(delivered.receiptHandle);
  });

  it("rejects with SQS's error when a call is refused", async () => {
    // A message already deleted (its receipt handle void), a delay over SQS's 15 minutes
    sqs.send('x');
    const received = sqs.receive()!;
    sqs.delete(received.receiptHandle);
    await expect(queue.retryIn(received.receiptHandle, 30)).rejects.toMatchObject({
      name: 'ReceiptHandleIsInvalid',
    });
    await expect(queue.sendIn('x', 901)).rejects.toMatchObject({ name: 'InvalidParameterValue' });
    await expect(new SqsTriggerQueue(client, `${sqs.queueUrl}-other`).sendIn('x', 0)).rejects.toMatchObject({
      name: 'QueueDoesNotExist',
    });
    expect(sqs.messages).toEqual([]);
  });
});
