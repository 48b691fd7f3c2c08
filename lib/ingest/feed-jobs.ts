import { type FeedAdminDeps, finishFeedDeletion } from '#lib/domain/admin/feeds.ts';
import { FEED_DELETION_JOB, type ImportRecord, importObjectKeys } from '#lib/domain/catalogue/imports.ts';
import { DomainError } from '#lib/domain/errors.ts';
import { type IngestDeps, ImportDeferred, runTriggeredImport } from '#lib/ingest/run-import.ts';

/** What the import runner needs for every job a trigger under `imports/{feedId}/` can name. */
export interface FeedJobDeps {
  ingest: IngestDeps;
  /** For a feed deletion handed over by its DELETE request; absent where no job asks for one. */
  admin?: FeedAdminDeps | undefined;
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
  if (jobId !== FEED_DELETION_JOB) return runTriggeredImport({ ...deps.ingest, signal }, feedId, jobId);
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
