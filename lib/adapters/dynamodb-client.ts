import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { Config } from '#lib/config.ts';

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
