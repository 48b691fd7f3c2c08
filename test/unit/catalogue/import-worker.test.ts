import type { S3Event, SQSEvent } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { importsOf } from '#functions/import-worker.ts';

const s3Record = (key: string) => ({ s3: { object: { key } } }) as unknown as S3Event['Records'][number];

describe('import worker events', () => {
  it('takes imports from S3 notifications of request markers only', () => {
    // Prepare: the feed file itself also lands under imports/ and must not start a second run.
    const event = {
      Records: [s3Record('imports/shop/imp_1/request.json'), s3Record('imports/shop/imp_1/feed')],
    } as S3Event;
    // Act / Assess
    expect(importsOf(event)).toEqual([{ feedId: 'shop', importId: 'imp_1' }]);
  });

  it('unwraps S3 notifications delivered through SQS and accepts direct messages', () => {
    const viaSqs = {
      Records: [{ body: JSON.stringify({ Records: [s3Record('imports/a%2Db/imp_2/request.json')] }) }],
    } as SQSEvent;
    const direct = { Records: [{ body: JSON.stringify({ feedId: 'f', importId: 'imp_3' }) }] } as SQSEvent;
    const testEvent = { Records: [{ body: JSON.stringify({ Event: 's3:TestEvent' }) }] } as SQSEvent;
    expect(importsOf(viaSqs)).toEqual([{ feedId: 'a-b', importId: 'imp_2' }]);
    expect(importsOf(direct)).toEqual([{ feedId: 'f', importId: 'imp_3' }]);
    expect(importsOf(testEvent)).toEqual([]);
  });
});
