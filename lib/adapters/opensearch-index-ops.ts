/**
 * Index plumbing shared by the OpenSearch adapters (vector index, visual-word index): status of a client
 * error, creating an index once, and feed-routed delete-by-query.
 */
import type { Client } from '@opensearch-project/opensearch';

/** HTTP status of an OpenSearch client error, when it has one. */
export function statusOf(error: unknown): number | undefined {
  return (error as { meta?: { statusCode?: number } } | undefined)?.meta?.statusCode;
}

/** Creates the index unless it exists; a concurrent creator winning the race is not an error. */
export async function createIndexIfMissing(
  client: Client,
  index: string,
  body: Record<string, unknown>,
): Promise<void> {
  const exists = await client.indices.exists({ index });
  if (exists.body) return;
  try {
    await client.indices.create({ index, body });
  } catch (error) {
    const type = (error as { meta?: { body?: { error?: { type?: string } } } }).meta?.body?.error?.type;
    if (type !== 'resource_already_exists_exception') throw error;
  }
}

/** Documents a feed deletion removes per delete_by_query call (a few seconds of work at most). */
const DELETE_BATCH = 10_000;

/**
 * Deletes a feed's documents matching `filter` (routed by the feed id). Deletes must be visible to the next
 * search, like upserts; a conflict with a concurrent re-index of the same document is resolved in favour of
 * the newer write. A missing index has nothing to delete.
 */
export async function deleteFeedDocuments(
  client: Client,
  index: string,
  feedId: string,
  filter: Array<Record<string, unknown>>,
  /** Document ids the query leaves alone. */
  except: readonly string[] = [],
  /**
   * `batch`: at most that many documents per call (`max_docs`), calls repeated until fewer match;
   * `signal` is looked at before each call.
   */
  options: { signal?: AbortSignal; batch?: number } = {},
): Promise<void> {
  const mustNot = except.length > 0 ? { must_not: [{ ids: { values: [...except] } }] } : {};
  const { batch } = options;
  try {
    for (;;) {
      options.signal?.throwIfAborted();
      const response = await client.deleteByQuery({
        index,
        routing: feedId,
        refresh: true,
        conflicts: 'proceed',
        body: { query: { bool: { filter, ...mustNot } }, ...(batch ? { max_docs: batch } : {}) },
      });
      // Fewer matched than `batch`: nothing is left (version conflicts count as matched, so they go on).
      if (!batch || Number((response.body as { total?: number }).total ?? 0) < batch) return;
    }
  } catch (error) {
    if (statusOf(error) === 404) return;
    throw error;
  }
}

/**
 * Deletes every document of a feed from `index`, DELETE_BATCH at a time, so that a feed deletion can stop
 * between calls (`signal`): a whole feed's deletion in one call can outlast the request that makes it.
 */
export function deleteWholeFeed(
  client: Client,
  index: string,
  feedId: string,
  options: { signal?: AbortSignal } = {},
): Promise<void> {
  return deleteFeedDocuments(client, index, feedId, [{ term: { feed_id: feedId } }], [], {
    ...options,
    batch: DELETE_BATCH,
  });
}
