/**
 * Which configuration keys (lib/config.ts) the CDK app sets on which functions. The record must cover
 * every key of CONFIG_ENV_KEYS: adding a key to the config without deciding here fails `tsc` (a key the
 * config no longer has is tolerated, so the two can be edited in either order).
 */
import type { CONFIG_ENV_KEYS } from '#lib/config.ts';

export type ConfigEnvKey = (typeof CONFIG_ENV_KEYS)[number];

/**
 * - `every`: set on every route function and the import worker (the container reads them at cold start).
 * - `registry`: set where the API key registry is bound (admin functions that create, move or delete keys).
 * - `authorizer`: the gateway authorizer only.
 * - `worker`: the import worker only.
 * - `runtime`: provided by the Lambda runtime (AWS_REGION is reserved).
 * - `default`: the config's default applies in AWS unless a stage tunes it (StageConfig.tuning: search
 *   tuning, limits, caches...).
 * - `local`: local mode only (embedded servers, data folder, admin token); never set in AWS.
 */
export type EnvScope = 'every' | 'registry' | 'authorizer' | 'worker' | 'runtime' | 'default' | 'local';

export const ENV_SCOPE = {
  STAGE: 'every',
  AWS_REGION: 'runtime',
  LOG_LEVEL: 'every',
  FEEDS_TABLE: 'every',
  KEYS_TABLE: 'every',
  USAGE_TABLE: 'every',
  PRODUCTS_TABLE: 'every',
  IMPORTS_TABLE: 'every',
  IDEMPOTENCY_TABLE: 'every',
  DYNAMODB_ENDPOINT: 'local',
  ASSETS_BUCKET: 'every',
  S3_ENDPOINT: 'local',
  VECTOR_INDEX: 'every',
  VECTOR_INDEX_DIR: 'local',
  WORD_INDEX_MEMORY_MB: 'local',
  OPENSEARCH_URL: 'every',
  OPENSEARCH_INDEX_PREFIX: 'every',
  OPENSEARCH_SIGV4: 'every',
  MODEL_DIR: 'every',
  EMBEDDING_PROJECTION: 'default',
  ADMIN_TOKEN: 'local',
  API_KEY_REGISTRY: 'every',
  USAGE_PLAN_FREE_ID: 'registry',
  USAGE_PLAN_PRO_ID: 'registry',
  USAGE_PLAN_ENTERPRISE_ID: 'registry',
  GATEWAY_SHARED_KEY: 'authorizer',
  PLAN_LIMIT_FREE: 'every',
  PLAN_LIMIT_PRO: 'every',
  PLAN_LIMIT_ENTERPRISE: 'every',
  AUTH_CACHE_TTL_SECONDS: 'default',
  MAX_BODY_BYTES: 'default',
  MAX_IMAGE_PIXELS: 'default',
  FETCH_ALLOW_PRIVATE: 'local',
  IMPORT_RUNNER: 'every',
  IMPORT_QUEUE_URL: 'worker',
  IMPORT_CHUNK_SIZE: 'default',
  IMAGE_FETCH_CONCURRENCY: 'default',
  IMAGE_FETCH_TIMEOUT_MS: 'default',
  IMAGE_MAX_BYTES: 'default',
  FEED_FETCH_TIMEOUT_MS: 'default',
  FEED_DELETE_BUDGET_MS: 'default',
  FEED_MAX_BYTES: 'default',
  RERANK_TOP_N: 'default',
  WORD_SHORTLIST_TOP_N: 'default',
  MIN_SCORE: 'default',
  FEATURE_CACHE_ITEMS: 'default',
  FEATURE_CACHE_MB: 'default',
  // The bundles carry no worker entry: extraction stays on the JS thread in AWS (default 0), so it is
  // never set there (and not tunable per stage).
  LOCAL_FEATURE_WORKERS: 'local',
  LOCAL_FEATURE_WORKER_ENTRY: 'local',
  QUERY_DETECTOR_CROP: 'default',
  REGIONAL_MATCHING: 'default',
  REGIONAL_TOP_N: 'default',
  SECOND_LOOK_BOXES: 'default',
  SECOND_LOOK_MIN_SCORE: 'default',
  SECOND_LOOK_WORD_TOP_N: 'default',
  DEMO_SEED: 'local',
  PORT: 'local',
  DATA_DIR: 'local',
} as const satisfies Readonly<Record<string, EnvScope>> & Record<ConfigEnvKey, EnvScope>;

export function keysOfScope(...scopes: EnvScope[]): string[] {
  const scopeOf: Readonly<Record<string, EnvScope>> = ENV_SCOPE;
  return Object.keys(scopeOf).filter((key) => scopes.includes(scopeOf[key]!));
}

/**
 * The keys a stage may tune (StageConfig.tuning, `--context tuning=...`; infra/tuning.ts): those whose
 * scope is `default`, i.e. the ones the stack leaves at the config's default unless told otherwise.
 */
export type TunableKey = Extract<
  {
    [K in keyof typeof ENV_SCOPE]: (typeof ENV_SCOPE)[K] extends 'default' ? K : never;
  }[keyof typeof ENV_SCOPE],
  ConfigEnvKey
>;

/** Where the model layer mounts (the layer asset holds `models/`). */
export const MODEL_DIR = '/opt/models';

/** Prefix of the OpenSearch indices (one per embedding model version); IAM grants are scoped to it. */
export const OPENSEARCH_INDEX_PREFIX = 'products';
