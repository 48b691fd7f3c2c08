import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  BatchWriteCommand,
  type BatchWriteCommandOutput,
  DynamoDBDocumentClient,
  QueryCommand,
  type QueryCommandInput,
  ScanCommand,
  type ScanCommandInput,
} from '@aws-sdk/lib-dynamodb';
import type { Config } from '#lib/config.ts';
import { mapLimit } from '#lib/ingest/concurrency.ts';

/** One document client per process. Local mode points it at the embedded DynamoDB-protocol server. */
export function createDocumentClient(
  config: Pick<Config, 'region' | 'dynamodbEndpoint'>,
): DynamoDBDocumentClient {
  const client = new DynamoDBClient({
    region: config.region,
    ...(config.dynamodbEndpoint
      ? { endpoint: config.dynamodbEndpoint, credentials: { accessKeyId: 'local', secretAccessKey: 'local' } }
      : {}),
    maxAttempts: 3,
  });
  return DynamoDBDocumentClient.from(client, {
    marshallOptions: { removeUndefinedValues: true, convertClassInstanceToMap: false },
  });
}

/** True for the SDK's conditional-write failure, whichever server produced it. */
export function isConditionalCheckFailed(error: unknown): boolean {
  return error instanceof Error && error.name === 'ConditionalCheckFailedException';
}

/**
 * Runs a query to its end, one page at a time (callers that act per page keep memory flat; the others
 * collect). With scanPages, the one place that follows LastEvaluatedKey.
 */
export async function* queryPages(
  db: DynamoDBDocumentClient,
  input: Omit<QueryCommandInput, 'ExclusiveStartKey'>,
): AsyncGenerator<Record<string, unknown>[]> {
  let start: Record<string, unknown> | undefined;
  do {
    const out = await db.send(new QueryCommand({ ...input, ExclusiveStartKey: start }));
    yield out.Items ?? [];
    start = out.LastEvaluatedKey;
  } while (start);
}

/** A scan of the whole table (or its filtered part) to its end, one page at a time. */
export async function* scanPages(
  db: DynamoDBDocumentClient,
  input: Omit<ScanCommandInput, 'ExclusiveStartKey'>,
): AsyncGenerator<Record<string, unknown>[]> {
  let start: Record<string, unknown> | undefined;
  do {
    const out = await db.send(new ScanCommand({ ...input, ExclusiveStartKey: start }));
    yield out.Items ?? [];
    start = out.LastEvaluatedKey;
  } while (start);
}

/** BatchWriteItem calls in flight for deletions of many distinct items (a feed's products, its usage). */
export const DELETE_BATCHES_IN_FLIGHT = 4;

/**
 * Sends put/delete requests to one table 25 at a time (BatchWriteItem's limit), sending the unprocessed
 * ones of each batch again with a growing pause (throttling) until none are left. `inFlight` batches go
 * at once: only for requests on distinct keys (the order between batches is then not kept); a feed's
 * deletion removes one item per product within an API request's time.
 */
export async function writeBatches(
  db: DynamoDBDocumentClient,
  table: string,
  requests: Record<string, unknown>[],
  options: { inFlight?: number } = {},
): Promise<void> {
  const batches: Record<string, unknown>[][] = [];
  for (let i = 0; i < requests.length; i += 25) batches.push(requests.slice(i, i + 25));
  await mapLimit(batches, options.inFlight ?? 1, async (first) => {
    let batch: Record<string, unknown>[] | undefined = first;
    for (let attempt = 0; batch && batch.length > 0; attempt += 1) {
      if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, Math.min(1000, 25 * 2 ** attempt)));
      const out: BatchWriteCommandOutput = await db.send(
        new BatchWriteCommand({ RequestItems: { [table]: batch as never } }),
      );
      batch = out.UnprocessedItems?.[table] as Record<string, unknown>[] | undefined;
    }
  });
}
