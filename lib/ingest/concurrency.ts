/**
 * Maps items with at most `limit` calls in flight; results keep the order of the items. After a call
 * fails no new one starts, and the calls in flight settle before the first error is thrown: a caller
 * that gives up (an import that stops, a deletion that gives its lease up) is not followed by writes
 * still being sent on its behalf.
 */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let failed: { error: unknown } | undefined;
  const worker = async () => {
    while (next < items.length && !failed) {
      const index = next;
      next += 1;
      try {
        results[index] = await fn(items[index]!);
      } catch (error) {
        failed ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  if (failed) throw failed.error;
  return results;
}
