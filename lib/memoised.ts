/**
 * `load` called at most once while it succeeds: every call shares the same promise; after a rejection the
 * next call tries again (a model, index or client that failed to load is retried by the next request).
 */
export function memoised<T>(load: () => Promise<T>): () => Promise<T> {
  let loading: Promise<T> | undefined;
  return () => {
    loading ??= load().catch((error: unknown) => {
      loading = undefined;
      throw error;
    });
    return loading;
  };
}
