import { feedStillLive, requireFeed } from '#lib/domain/admin/feeds.ts';
import {
  importObjectKeys,
  newImportId,
  type ImportRecord,
  type StartImportRequest,
} from '#lib/domain/catalogue/imports.ts';
import { NotFoundError, ValidationError } from '#lib/domain/errors.ts';
import type { Clock, FeedStore, ImportDispatcher, ImportStore, ObjectStore } from '#lib/ports.ts';

export interface StartImportDeps {
  feeds: Pick<FeedStore, 'get'>;
  imports: ImportStore;
  objects: ObjectStore;
  dispatcher: ImportDispatcher;
  clock: Clock;
}

/**
 * Queues a feed import (the work happens off the request path). Steps:
 * 1. check the feed exists;
 * 2. store inline content as the import's feed file (a URL is fetched later, by the import itself);
 * 3. create the import record, status queued;
 * 4. write the request marker (its creation starts the worker in AWS) and hand the import to the dispatcher.
 */
export async function startImport(
  deps: StartImportDeps,
  feedId: string,
  input: StartImportRequest,
): Promise<ImportRecord> {
  const feed = await requireFeed(deps.feeds, feedId);
  const at = deps.clock.now();
  const importId = newImportId(at);
  const keys = importObjectKeys(feedId, importId);
  if (input.content !== undefined)
    await deps.objects.put(keys.file, input.content, 'text/plain; charset=utf-8');
  const record: ImportRecord = {
    feedId,
    importId,
    status: 'queued',
    mode: input.mode,
    source: input.url !== undefined ? { kind: 'url', url: input.url } : { kind: 'inline' },
    ...(input.format !== undefined ? { format: input.format } : {}),
    objectKey: keys.file,
    total: 0,
    processed: 0,
    embedded: 0,
    updated: 0,
    skipped: 0,
    failed: 0,
    removed: 0,
    errors: [],
    checkpointRow: 0,
    feedCreatedAt: feed.createdAt,
    createdAt: at.toISOString(),
    updatedAt: at.toISOString(),
  };
  // (The request marker too: a write that failed may have reached the store, its answer lost.)
  const takeBack = () =>
    Promise.all([
      deps.imports.delete(feedId, importId),
      input.content !== undefined ? deps.objects.delete(keys.file) : undefined,
      deps.objects.delete(keys.request),
    ]);
  try {
    await deps.imports.create(record);
    if (!(await feedStillLive(deps.feeds, feed))) {
      // The feed's deletion started meanwhile (and may have listed the imports before this one): it goes.
      await takeBack();
      throw new NotFoundError('feed_not_found', `Feed ${feedId} not found.`);
    }
    await deps.objects.put(keys.request, JSON.stringify({ feedId, importId }), 'application/json');
  } catch (error) {
    // Without its record or request marker nothing would ever run the import (queued for good, and listed;
    // the uploaded file left over): it goes, so the error leaves nothing behind and a retry (the same
    // Idempotency-Key runs again) makes one import.
    if (!(error instanceof NotFoundError)) await takeBack().catch(() => undefined);
    throw error;
  }
  await deps.dispatcher.dispatch(feedId, importId);
  return record;
}

export async function getImport(
  deps: Pick<StartImportDeps, 'imports' | 'feeds'>,
  feedId: string,
  importId: string,
): Promise<ImportRecord> {
  await requireFeed(deps.feeds, feedId);
  const record = await deps.imports.get(feedId, importId);
  if (!record) throw new NotFoundError('import_not_found', `Import ${importId} not found in feed ${feedId}.`);
  return record;
}

/** The feed's imports, newest first. */
export async function listImports(
  deps: Pick<StartImportDeps, 'imports' | 'feeds'>,
  feedId: string,
  limit: number,
  cursor?: string,
): Promise<{ imports: ImportRecord[]; cursor?: string }> {
  await requireFeed(deps.feeds, feedId);
  const page = await deps.imports.page(feedId, limit, cursor && importIdOfCursor(cursor));
  const last = page.records.at(-1);
  return {
    imports: page.records,
    ...(page.more && last ? { cursor: Buffer.from(last.importId).toString('base64url') } : {}),
  };
}

/** The import id a cursor of this listing names (the last one listed, in base64url); 400 otherwise. */
function importIdOfCursor(cursor: string): string {
  const importId = Buffer.from(cursor, 'base64url').toString('utf8');
  if (!/^imp_[A-Za-z0-9_-]{1,100}$/.test(importId) || Buffer.from(importId).toString('base64url') !== cursor)
    throw new ValidationError('Invalid cursor.', [
      { path: 'cursor', message: 'not a cursor of this listing' },
    ]);
  return importId;
}
