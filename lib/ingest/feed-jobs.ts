import { type FeedAdminDeps, finishFeedDeletion } from '#lib/domain/admin/feeds.ts';
import { FEED_DELETION_JOB, type ImportRecord, importObjectKeys } from '#lib/domain/catalogue/imports.ts';
import { DomainError } from '#lib/domain/errors.ts';
import { type IngestDeps, ImportDeferred, runTriggeredImport } from '#lib/ingest/run-import.ts';
import type { Logger } from '#lib/log.ts';

/** What the import runner needs for every job a trigger under `imports/{feedId}/` can name. */
export interface FeedJobDeps {
  ingest: IngestDeps;
  /** For a feed deletion handed over by its DELETE request; absent where no job asks for one. */
  admin?: FeedAdminDeps | undefined;
  /** Where "import started" and "import finished" go; absent: not logged. */
  logger?: Logger | undefined;
}

/**
 * Runs the job a trigger names: the feed's imports (runTriggeredImport), or, for FEED_DELETION_JOB, the
 * rest of a feed deletion its request could not finish. `signal` pauses either (the local stop, the
 * worker's time budget): a paused deletion throws the signal's reason and stays marked for the next run;
 * a deletion that finds the feed's lease held is deferred like an import (ImportDeferred).
 */
export async function runFeedJob(
  deps: FeedJobDeps,
  feedId: string,
  jobId: string,
  signal?: AbortSignal,
): Promise<ImportRecord | undefined> {
  if (jobId !== FEED_DELETION_JOB) {
    const { logger, ingest } = deps;
    // The log lines beside any hooks the ingest dependencies bring.
    const hooks = logger
      ? {
          // (The line first: a hook of the ingest's that throws does not cost it, nor a FailedImports count.)
          onStart: (record: ImportRecord) => {
            logImportStart(logger, record);
            ingest.onStart?.(record);
          },
          onFinish: (record: ImportRecord, ms: number) => {
            logImportEnd(logger, record, ms);
            ingest.onFinish?.(record, ms);
          },
        }
      : {};
    return runTriggeredImport({ ...ingest, signal, ...hooks }, feedId, jobId);
  }
  if (!deps.admin) throw new Error('This runner cannot finish feed deletions (no admin dependencies).');
  let finished: boolean;
  try {
    finished = await finishFeedDeletion(deps.admin, feedId, signal);
  } catch (error) {
    if (error instanceof DomainError && error.code === 'conflict')
      throw new ImportDeferred(`The deletion of feed ${feedId} waits for its lease.`);
    throw error;
  }
  if (!finished) signal?.throwIfAborted();
  // Done (or the feed was gone already): a trigger a repeated DELETE wrote after the deletion's own sweep
  // of imports/ goes too.
  await deps.admin.objects.delete(importObjectKeys(feedId, FEED_DELETION_JOB).request);
  return undefined;
}

/**
 * "import started", as the runner takes an import on (a trigger deferred by a busy feed logs none): its
 * ids, the run's attempt (runs since its last checkpoint, this one included: a third in a row that fails
 * ends it failed), its mode and source, a URL by its host alone (its path or query may carry credentials).
 */
function logImportStart(logger: Logger, record: ImportRecord): void {
  logger.info('import started', {
    feedId: record.feedId,
    importId: record.importId,
    attempt: record.attempts ?? 1,
    mode: record.mode,
    ...importSourceFields(record.source),
    ...(record.checkpointRow > 0 ? { resumedAfterRow: record.checkpointRow } : {}),
  });
}

/** An import's source for a log line: its kind, and a URL's host alone (never the URL: credentials). */
export function importSourceFields(source: ImportRecord['source']): Record<string, string> {
  if (source.kind !== 'url') return { source: source.kind };
  try {
    return { source: source.kind, sourceHost: new URL(source.url).host };
  } catch {
    return { source: source.kind };
  }
}

/**
 * "import finished", as a run ends an import (once per import, whichever trigger ran it): at warn when it
 * failed, with its `reason` (why), its counts and `ms`, how long this run took (a resumed import's earlier
 * runs are not in it).
 */
export function logImportEnd(logger: Logger, record: ImportRecord, ms: number): void {
  const fields = {
    feedId: record.feedId,
    importId: record.importId,
    status: record.status,
    ...(record.message === undefined ? {} : { reason: record.message }),
    total: record.total,
    processed: record.processed,
    embedded: record.embedded,
    updated: record.updated,
    skipped: record.skipped,
    failed: record.failed,
    removed: record.removed,
    ms,
  };
  if (record.status === 'failed') logger.warn('import finished', fields);
  else logger.info('import finished', fields);
}
