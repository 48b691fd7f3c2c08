/**
 * Binders set a function's configuration key and its IAM grant in one call, so configuration and
 * permissions never drift: a function that can reach a resource is told its name, and the grant is the
 * narrowest that the adapters behind that key need. Grants name resources exactly (tables and each of
 * their indexes); the few wildcards left (object keys, index names, API key ids) are acknowledged to
 * cdk-nag right here, one by one, with the reason.
 */
import { Stack, Validations } from 'aws-cdk-lib';
import type * as apigateway from 'aws-cdk-lib/aws-apigateway';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { RATE_LIMIT_PARTITION_PREFIX, type TableDefinition } from '#lib/adapters/dynamodb-tables.ts';
import type { Config } from '#lib/config.ts';
import { type ConfigEnvKey, OPENSEARCH_INDEX_PREFIX } from '../function-environment.ts';

/**
 * read: GetItem, BatchGetItem, Query (by key or index). readList: also Scan (only the feeds listing
 * scans a table in AWS). readUpdate: GetItem + UpdateItem by key (counters, last-used, revocation): no
 * listing, no Put/Delete. countUpdate: readUpdate and a Query by key (the usage table's rate-limit
 * buckets), no index. putDelete: PutItem + DeleteItem by key, nothing read (recording an import,
 * and taking the record back). readWrite: read's actions and every item write. Nothing here grants
 * Scan, DescribeTable or the transactional ConditionCheckItem where no adapter calls them.
 */
export type TableAccess = 'read' | 'readList' | 'readUpdate' | 'countUpdate' | 'putDelete' | 'readWrite';
export type TableName = keyof Config['tables'];

export const TABLE_ENV: Record<TableName, ConfigEnvKey> = {
  feeds: 'FEEDS_TABLE',
  keys: 'KEYS_TABLE',
  usage: 'USAGE_TABLE',
  products: 'PRODUCTS_TABLE',
  imports: 'IMPORTS_TABLE',
  idempotency: 'IDEMPOTENCY_TABLE',
};

const READ = ['dynamodb:GetItem', 'dynamodb:BatchGetItem', 'dynamodb:Query'];
export const TABLE_ACTIONS: Record<TableAccess, string[]> = {
  read: READ,
  readList: [...READ, 'dynamodb:Scan'],
  readUpdate: ['dynamodb:GetItem', 'dynamodb:UpdateItem'],
  // The rate limit: a search id's recent buckets read with one Query by key, the current one updated.
  countUpdate: ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:UpdateItem'],
  putDelete: ['dynamodb:PutItem', 'dynamodb:DeleteItem'],
  readWrite: [
    ...READ,
    'dynamodb:PutItem',
    'dynamodb:UpdateItem',
    'dynamodb:DeleteItem',
    'dynamodb:BatchWriteItem',
  ],
};

/** Accesses that may Query or Scan an index; the others act on items by key, which indexes have not. */
const READS_INDEXES: ReadonlySet<TableAccess> = new Set(['read', 'readList', 'readWrite']);

/** A table with its definition (for the index names: grants name each index, no `index/*`). */
export interface BoundTable {
  table: dynamodb.ITable;
  definition: TableDefinition;
}

export function bindTable(fn: lambda.Function, { table, definition }: BoundTable, access: TableAccess): void {
  fn.addEnvironment(TABLE_ENV[definition.configKey], table.tableName);
  // countUpdate's Query reads the rate-limit partitions only (IAM LeadingKeys): not a feed's usage rows,
  // which name its search ids and contexts.
  const conditioned = access === 'countUpdate' ? ['dynamodb:Query'] : [];
  fn.addToRolePolicy(
    new iam.PolicyStatement({
      actions: TABLE_ACTIONS[access].filter((action) => !conditioned.includes(action)),
      resources: [
        table.tableArn,
        ...(READS_INDEXES.has(access)
          ? definition.indexes.map((index) => `${table.tableArn}/index/${index.name}`)
          : []),
      ],
    }),
  );
  if (conditioned.length > 0)
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: conditioned,
        resources: [table.tableArn],
        conditions: {
          'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${RATE_LIMIT_PARTITION_PREFIX}*`] },
        },
      }),
    );
}

/** The assets bucket by name (a literal: account and region are fixed per stage). */
export interface BoundBucket {
  bucket: { bucketName: string };
  /** Literal bucket name, so the object ARN is a plain string. */
  name: string;
}

export type BucketAccess = 'read' | 'write' | 'readWrite';

const BUCKET_ACTIONS: Record<BucketAccess, string[]> = {
  read: ['s3:GetObject'],
  write: ['s3:PutObject', 's3:DeleteObject'],
  readWrite: ['s3:GetObject', 's3:PutObject', 's3:DeleteObject', 's3:AbortMultipartUpload'],
};

/**
 * read: GetObject under `prefix`, and listing it (without ListBucket, S3 answers 403 rather than 404
 * for a missing key). write: single-request Put and Delete there, nothing read or listed (storing an
 * import's feed file and request marker). readWrite: all of these, and aborting a multipart upload.
 */
export function bindBucket(
  fn: lambda.Function,
  { bucket, name }: BoundBucket,
  access: BucketAccess,
  prefix: string,
): void {
  fn.addEnvironment('ASSETS_BUCKET', bucket.bucketName);
  const objects = `arn:${Stack.of(fn).partition}:s3:::${name}/${prefix}*`;
  fn.addToRolePolicy(new iam.PolicyStatement({ actions: BUCKET_ACTIONS[access], resources: [objects] }));
  if (access !== 'write') {
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['s3:ListBucket'],
        resources: [`arn:${Stack.of(fn).partition}:s3:::${name}`],
        conditions: { StringLike: { 's3:prefix': [`${prefix}*`] } },
      }),
    );
  }
  acknowledgeWildcard(
    fn,
    objects,
    `Object keys under ${prefix} of the assets bucket are not known in advance.`,
  );
}

/** The OpenSearch domain by name and endpoint. */
export interface BoundSearchDomain {
  domainName: string;
  domainEndpoint: string;
}

/** Environment that points the VectorIndex adapter at the domain (SigV4-signed HTTPS). */
export function searchDomainEnvironment(domain: BoundSearchDomain): Record<string, string> {
  return {
    VECTOR_INDEX: 'opensearch',
    OPENSEARCH_URL: `https://${domain.domainEndpoint}`,
    OPENSEARCH_SIGV4: 'true',
    OPENSEARCH_INDEX_PREFIX,
  };
}

/**
 * read: GET/HEAD on the product indices and POST only on the query endpoints the adapters call
 * (_search, _msearch, _count: k-NN queries are POSTs). readWrite: every HTTP verb on the product indices (their own
 * _bulk endpoints included).
 */
export function bindSearchDomain(
  fn: lambda.Function,
  domain: BoundSearchDomain,
  access: 'read' | 'readWrite',
): void {
  for (const [key, value] of Object.entries(searchDomainEnvironment(domain))) fn.addEnvironment(key, value);
  const stack = Stack.of(fn);
  const arn = `arn:${stack.partition}:es:${stack.region}:${stack.account}:domain/${domain.domainName}`;
  const indices = [`${arn}/${OPENSEARCH_INDEX_PREFIX}*`, `${arn}/${OPENSEARCH_INDEX_PREFIX}*/*`];
  const reason = `One index per embedding model version, all named ${OPENSEARCH_INDEX_PREFIX}-<model version>: the version is not known at deploy time.`;
  if (access === 'read') {
    const queries = ['_search', '_msearch', '_count'].map((op) => `${arn}/${OPENSEARCH_INDEX_PREFIX}*/${op}`);
    fn.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['es:ESHttpGet', 'es:ESHttpHead'], resources: indices }),
    );
    fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['es:ESHttpPost'], resources: queries }));
    for (const resource of [...indices, ...queries]) acknowledgeWildcard(fn, resource, reason);
  } else {
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['es:ESHttpGet', 'es:ESHttpHead', 'es:ESHttpPost', 'es:ESHttpPut', 'es:ESHttpDelete'],
        // Bulk requests name their index (/<index>/_bulk), so no domain-wide _bulk is granted: with it,
        // a role could write to any index through the action lines.
        resources: indices,
      }),
    );
    for (const resource of indices) acknowledgeWildcard(fn, resource, reason);
  }
}

/** The gateway usage plans the API key registry moves keys among (one per feed plan). */
export interface ApiKeyRegistryTarget {
  plans: { free: apigateway.IUsagePlan; pro: apigateway.IUsagePlan; enterprise: apigateway.IUsagePlan };
}

/**
 * API key registry (lib/adapters/apigateway-api-key-registry.ts): GetApiKeys (GET /apikeys), CreateApiKey
 * (POST /apikeys), DeleteApiKey (DELETE /apikeys/{id}), Create/DeleteUsagePlanKey on the Free, Pro and
 * Enterprise plans only (POST /usageplans/{id}/keys, DELETE /usageplans/{id}/keys/{keyId}). Usage plan keys
 * name no REST API, so the functions get the plan ids only.
 */
export function bindApiKeyRegistry(fn: lambda.Function, target: ApiKeyRegistryTarget): void {
  fn.addEnvironment('API_KEY_REGISTRY', 'apigateway');
  fn.addEnvironment('USAGE_PLAN_FREE_ID', target.plans.free.usagePlanId);
  fn.addEnvironment('USAGE_PLAN_PRO_ID', target.plans.pro.usagePlanId);
  fn.addEnvironment('USAGE_PLAN_ENTERPRISE_ID', target.plans.enterprise.usagePlanId);
  const stack = Stack.of(fn);
  // API Gateway management ARNs have no account: arn:<partition>:apigateway:<region>::/<path>.
  const path = (resource: string) => `arn:${stack.partition}:apigateway:${stack.region}::${resource}`;
  const plans = [target.plans.free, target.plans.pro, target.plans.enterprise].map(
    (plan) => plan.usagePlanId,
  );
  const deletable = [path('/apikeys/*'), ...plans.map((id) => path(`/usageplans/${id}/keys/*`))];
  fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['apigateway:GET'], resources: [path('/apikeys')] }));
  fn.addToRolePolicy(
    new iam.PolicyStatement({
      actions: ['apigateway:POST'],
      resources: [path('/apikeys'), ...plans.map((id) => path(`/usageplans/${id}/keys`))],
    }),
  );
  fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['apigateway:DELETE'], resources: deletable }));
  for (const resource of deletable) {
    acknowledgeWildcard(
      fn,
      resource,
      "API key ids are generated when a search id is created; only DELETE is allowed, and only on API keys and the Free/Pro/Enterprise plans' keys.",
    );
  }
}

/**
 * The import worker's own queue (functions/import-worker.ts): it sends a deferred trigger again
 * (SendMessage); the SQS event source grants what a failed one's back-off needs (ChangeMessageVisibility).
 */
export function bindTriggerQueue(fn: lambda.Function, queue: sqs.IQueue): void {
  fn.addEnvironment('IMPORT_QUEUE_URL', queue.queueUrl);
  queue.grantSendMessages(fn);
}

/**
 * Acknowledges one wildcard resource of a function's policy to cdk-nag (AwsSolutions-IAM5), using the
 * finding id cdk-nag derives from the resolved resource. Only literal and same-stack references may be
 * passed: a cross-stack reference resolves differently before synthesis.
 */
export function acknowledgeWildcard(fn: lambda.Function, resource: string, reason: string): void {
  const flat = flattenReference(Stack.of(fn).resolve(resource));
  Validations.of(fn).acknowledge({ id: `AwsSolutions-IAM5[Resource::${flat}]`, reason });
}

/** Mirrors cdk-nag's flattening of CloudFormation references (`{Ref: X}` → `<X>`, joins concatenated). */
function flattenReference(node: unknown): string {
  if (node === undefined) return '';
  if (typeof node === 'string') return node.replace(/\$\{/g, '<').replace(/}/g, '>');
  const value = node as Record<string, unknown>;
  if (value['Fn::Join']) {
    const [delimiter, items] = value['Fn::Join'] as [string, unknown[]];
    return items.map(flattenReference).join(delimiter);
  }
  if (value['Fn::Sub']) return flattenReference(value['Fn::Sub']);
  if (value['Fn::GetAtt']) {
    const [resource, attribute] = value['Fn::GetAtt'] as [unknown, unknown];
    return `<${flattenReference(resource)}.${flattenReference(attribute)}>`;
  }
  if (value['Fn::ImportValue']) return flattenReference(value['Fn::ImportValue']);
  if (value.Ref) return `<${flattenReference(value.Ref)}>`;
  return JSON.stringify(node);
}
