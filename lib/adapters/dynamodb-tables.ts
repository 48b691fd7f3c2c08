import type { Config } from '#lib/config.ts';

/**
 * Key schemas of every DynamoDB table, shared by the local runtime (which creates the tables on start) and
 * the CDK stack (which declares them), so the two never drift. Every key attribute is a string.
 */
export interface TableDefinition {
  /** Which entry of Config['tables'] names this table. */
  configKey: keyof Config['tables'];
  partitionKey: string;
  sortKey?: string;
  indexes: { name: string; partitionKey: string; sortKey?: string }[];
  /** Attribute holding an epoch-seconds expiry (DynamoDB TTL in AWS; local mode: lib/local/ttl-sweeper.ts). */
  ttlAttribute?: string;
}

export const TABLES: readonly TableDefinition[] = [
  { configKey: 'feeds', partitionKey: 'feedId', indexes: [] },
  {
    configKey: 'keys',
    partitionKey: 'searchId',
    indexes: [{ name: 'byFeed', partitionKey: 'feedId', sortKey: 'createdAt' }],
  },
  { configKey: 'usage', partitionKey: 'pk', sortKey: 'sk', indexes: [], ttlAttribute: 'expiresAt' },
  {
    configKey: 'products',
    partitionKey: 'feedId',
    sortKey: 'productId',
    indexes: [
      { name: 'byItemGroup', partitionKey: 'feedItemGroup', sortKey: 'productId' },
      { name: 'byId', partitionKey: 'id' },
    ],
  },
  { configKey: 'imports', partitionKey: 'feedId', sortKey: 'importId', indexes: [] },
  // Answers of admin creates sent with an Idempotency-Key, for a day (lib/http/idempotency.ts).
  { configKey: 'idempotency', partitionKey: 'idempotencyKey', indexes: [], ttlAttribute: 'expiresAt' },
];

/**
 * The usage table's partitions of the rate-limit counters (`rate#<searchId>`): the only ones the public
 * functions query (IAM `dynamodb:LeadingKeys`, infra/constructs/bindings.ts), not a feed's usage rows.
 */
export const RATE_LIMIT_PARTITION_PREFIX = 'rate#';
