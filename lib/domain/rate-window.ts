/**
 * Rolling-hour allowance counted in 5-minute buckets. At a time T in bucket k, the requests of the
 * rolling hour are counted as those of bucket k and the 12 buckets before it: a request weighs on the
 * limit from its bucket until 12 buckets after it have ended, 60 to 65 minutes. Any 60-minute span lies
 * within 13 consecutive buckets, and every admission keeps the 13 buckets ending with its own within the
 * limit, so no 60-minute span ever admits more than the limit; the price is that a request's slot comes
 * back up to 5 minutes late.
 *
 * (Weighting bucket k - 12 by the part of it still inside the hour, as a sliding-window counter does,
 * would free slots sooner but assumes its requests spread evenly over it: 100 requests in its last 30 s
 * then count as 10 at that moment, and up to 190 of a limit of 100 pass in one 60-minute span.)
 *
 * Pure arithmetic, so the adapter only stores one counter per bucket and the rules are tested without a
 * database.
 */
export const BUCKET_MS = 300_000;
/** Buckets before the current one that still count. */
export const WINDOW_BUCKETS = 12;

/**
 * Counts of the 12 buckets before the current one, newest first: `previous[0]` is the bucket just
 * before the current one, `previous[11]` the oldest that still counts. Missing entries count as 0.
 */
export type PreviousCounts = readonly number[];

/** Start of the bucket holding `now`, epoch ms. */
export function bucketStart(now: Date): number {
  return Math.floor(now.getTime() / BUCKET_MS) * BUCKET_MS;
}

/** Requests of the 12 previous buckets. */
export function previousTotal(previous: PreviousCounts): number {
  let sum = 0;
  for (let i = 0; i < WINDOW_BUCKETS; i++) sum += previous[i] ?? 0;
  return sum;
}

/** How many requests the current bucket may hold in total before refusing, given the previous counts. */
export function currentBucketCapacity(limit: number, previous: PreviousCounts): number {
  return Math.floor(limit - previousTotal(previous));
}

/**
 * Counts from bucket k - 12 (index 0) to the current bucket k (index 12); later buckets are empty
 * (no further admitted requests are assumed).
 */
function timeline(previous: PreviousCounts, current: number): (j: number) => number {
  const counts = [
    ...Array.from({ length: WINDOW_BUCKETS }, (_, i) => previous[WINDOW_BUCKETS - 1 - i] ?? 0),
    current,
  ];
  return (j) => counts[j] ?? 0;
}

/**
 * Seconds a refused client must wait, assuming no further admitted requests, until one more request fits:
 * until the start of the first bucket whose count together with its 12 predecessors' is at most
 * limit - 1. Never less than 1.
 */
export function retryAfterSeconds(
  limit: number,
  previous: PreviousCounts,
  current: number,
  now: Date,
): number {
  const t = now.getTime();
  const start = bucketStart(now);
  const count = timeline(previous, current);
  // In bucket k + n the buckets k + n - 12 .. k + n count (timeline indices n .. n + 12).
  let counted = 0;
  for (let j = 0; j <= WINDOW_BUCKETS; j++) counted += count(j);
  for (let n = 0; n <= WINDOW_BUCKETS + 1; n++) {
    if (n > 0) counted += count(n + WINDOW_BUCKETS) - count(n - 1);
    if (counted <= limit - 1) return Math.max(1, Math.ceil((start + n * BUCKET_MS - t) / 1000));
  }
  // A limit below 1 never admits anything: come back when everything counted has left the window.
  return Math.max(1, Math.ceil((start + (WINDOW_BUCKETS + 1) * BUCKET_MS - t) / 1000));
}

/**
 * Seconds until the whole allowance is back (RateLimit-Reset): until the newest non-empty bucket has
 * left the window (a bucket counts until the 12th bucket after it ends). So with requests counted in the
 * current bucket it is 60 to 65 minutes; 0 when nothing is counted. Never earlier than a refused client's
 * Retry-After (retryAfterSeconds) for a limit of at least 1: nothing is counted by then.
 */
export function secondsToFullAllowance(previous: PreviousCounts, current: number, now: Date): number {
  const t = now.getTime();
  const start = bucketStart(now);
  const count = timeline(previous, current);
  for (let j = WINDOW_BUCKETS; j >= 0; j--) {
    if (count(j) <= 0) continue;
    // Bucket j starts at start + (j - 12) · BUCKET_MS and counts until the end of bucket j + 12.
    return Math.max(0, Math.ceil((start + (j + 1) * BUCKET_MS - t) / 1000));
  }
  return 0;
}
