/**
 * What each function may touch, by route name (lib/http/routes.ts). Binders in constructs/bindings.ts
 * turn a profile into IAM grants. A route without an entry gets its access level's default profile and a
 * synth warning, so a new route deploys but is reviewed.
 */
import type { Route } from '#lib/http/routes.ts';
import type { BucketAccess, TableAccess, TableName } from './constructs/bindings.ts';
import { FEATURES_PREFIX, IMPORTS_PREFIX } from './stacks/stateful-stack.ts';

export interface AccessProfile {
  tables: Partial<Record<TableName, TableAccess>>;
  /** Objects of the assets bucket, by key prefix. */
  buckets?: { access: BucketAccess; prefix: string }[];
  search?: 'read' | 'readWrite';
  /** Creates, moves or deletes gateway API keys (admin key and feed lifecycle). */
  apiKeyRegistry?: boolean;
  /** Needs the ONNX model layer. */
  models?: boolean;
}

/**
 * Public endpoints: read the search id and its feed, touch the key's last-used time (UpdateItem only),
 * count usage (UpdateItem + Query), read products, vectors and the catalogue's stored local features (for
 * geometric verification), run the models. No Put/Delete anywhere.
 */
export const PUBLIC_PROFILE: AccessProfile = {
  tables: { keys: 'readUpdate', feeds: 'read', usage: 'countUpdate', products: 'read' },
  buckets: [{ access: 'read', prefix: FEATURES_PREFIX }],
  search: 'read',
  models: true,
};

/** Unknown admin routes: read-only until reviewed. */
export const ADMIN_DEFAULT_PROFILE: AccessProfile = {
  tables: { feeds: 'read', keys: 'read', usage: 'read', products: 'read', imports: 'read' },
};

/**
 * Deleting a feed removes its keys (and their gateway keys), products, vectors, imports with their feed
 * files, local features and usage.
 */
const FEED_DELETION_PROFILE: AccessProfile = {
  tables: {
    feeds: 'readWrite',
    keys: 'readWrite',
    products: 'readWrite',
    imports: 'readWrite',
    usage: 'readWrite',
  },
  buckets: [
    { access: 'readWrite', prefix: IMPORTS_PREFIX },
    { access: 'readWrite', prefix: FEATURES_PREFIX },
  ],
  search: 'readWrite',
  apiKeyRegistry: true,
};

/**
 * The import worker: reads the request and feed file under imports/ (and stores a fetched feed file
 * there), writes products, vectors, the products' local features under features/ and import progress.
 * It also finishes the feed deletions a DELETE request hands over (lib/ingest/feed-jobs.ts), so it has
 * the deletion's access (which covers the imports' tables, prefixes and index) and the models.
 */
export const IMPORT_WORKER_PROFILE: AccessProfile = { ...FEED_DELETION_PROFILE, models: true };

export const ROUTE_ACCESS: Record<string, AccessProfile> = {
  SearchImage: PUBLIC_PROFILE,
  Detect: PUBLIC_PROFILE,
  Related: PUBLIC_PROFILE,
  RootSearch: PUBLIC_PROFILE,

  // A feed's answers show its newest import (imports: one Query; a new feed has none).
  AdminCreateFeed: { tables: { feeds: 'readWrite', idempotency: 'readWrite' } },
  // The one listing by Scan (feeds are few; the others list by key or index).
  AdminListFeeds: { tables: { feeds: 'readList', imports: 'read' } },
  AdminGetFeed: { tables: { feeds: 'read', imports: 'read' } },
  // A plan change moves the feed's keys to the other usage plan.
  AdminUpdateFeed: { tables: { feeds: 'readWrite', keys: 'read', imports: 'read' }, apiKeyRegistry: true },
  AdminDeleteFeed: FEED_DELETION_PROFILE,
  AdminCreateKey: {
    tables: { feeds: 'read', keys: 'readWrite', idempotency: 'readWrite' },
    apiKeyRegistry: true,
  },
  AdminListKeys: { tables: { feeds: 'read', keys: 'read' } },
  AdminRevokeKey: { tables: { keys: 'readUpdate' }, apiKeyRegistry: true },
  AdminGetUsage: { tables: { feeds: 'read', usage: 'read' } },
  // Starting an import records it and writes the feed file and the request marker under imports/ (the
  // marker's S3 event starts the worker); when the feed's deletion began meanwhile, it takes the record
  // and the file back. It reads neither.
  AdminStartImport: {
    tables: { feeds: 'read', imports: 'putDelete', idempotency: 'readWrite' },
    buckets: [{ access: 'write', prefix: IMPORTS_PREFIX }],
  },
  AdminListImports: { tables: { feeds: 'read', imports: 'read' } },
  AdminGetImport: { tables: { feeds: 'read', imports: 'read' } },
  AdminListProducts: { tables: { feeds: 'read', products: 'read' } },
};

/** The profile of a route, and whether it came from the table (false = default, needs review). */
export function accessOf(route: Route): { profile: AccessProfile; reviewed: boolean } {
  const profile = ROUTE_ACCESS[route.name];
  if (profile) return { profile, reviewed: true };
  return { profile: route.access === 'public' ? PUBLIC_PROFILE : ADMIN_DEFAULT_PROFILE, reviewed: false };
}
