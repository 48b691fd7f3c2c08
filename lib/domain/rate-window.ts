/**
 * Rolling-hour allowance as a sliding-window counter: the previous fixed hour counts with the weight of
 * the part of it still inside the rolling hour. Pure arithmetic, so the adapter only stores two counters
 * and the rules are tested without a database.
 */
export const WINDOW_MS = 3_600_000;

export interface WindowPosition {
  /** Start of the current fixed window, epoch ms. */
  start: number;
  /** Fraction of the current window already elapsed, in [0, 1). */
  elapsed: number;
}

export function windowAt(now: Date): WindowPosition {
  const t = now.getTime();
  const start = Math.floor(t / WINDOW_MS) * WINDOW_MS;
  return { start, elapsed: (t - start) / WINDOW_MS };
}

/** How many requests the current window may hold in total before refusing, given the previous count. */
export function currentWindowCapacity(limit: number, previousCount: number, elapsed: number): number {
  return Math.floor(limit - previousCount * (1 - elapsed));
}

/** Seconds until the current window ends. */
export function secondsToWindowEnd(position: WindowPosition, now: Date): number {
  return Math.max(1, Math.ceil((position.start + WINDOW_MS - now.getTime()) / 1000));
}

/**
 * Seconds until the whole allowance is back (RateLimit-Reset): a window's count weighs on the rolling
 * hour until the end of the window after it. So with requests counted in this window it is the end of
 * the next one; with only the previous window's, the end of this one. Never earlier than a refused
 * client's Retry-After (retryAfterSeconds), which a client retrying at the reset would otherwise meet.
 */
export function secondsToFullAllowance(
  previousCount: number,
  currentCount: number,
  position: WindowPosition,
  now: Date,
): number {
  const toWindowEnd = secondsToWindowEnd(position, now);
  if (currentCount > 0) return toWindowEnd + WINDOW_MS / 1000;
  return previousCount > 0 ? toWindowEnd : 0;
}

/**
 * Seconds a refused client must wait, assuming no further admitted requests, until one more request fits:
 * the weighted count must drop to limit - 1 or below.
 */
export function retryAfterSeconds(
  limit: number,
  previousCount: number,
  currentCount: number,
  position: WindowPosition,
  now: Date,
): number {
  const windowSeconds = WINDOW_MS / 1000;
  const room = limit - 1 - currentCount;
  // (The 1e-9 below keeps float noise such as 36.000000001 from adding a whole second.)
  if (room >= 0 && previousCount > 0) {
    // Within this window: previous * (1 - elapsed - s/3600) <= limit - 1 - current.
    const s = (windowSeconds * (previousCount * (1 - position.elapsed) - room)) / previousCount;
    return Math.max(1, Math.ceil(s - 1e-9));
  }
  // Only the next window helps: the current count becomes the previous one and decays from there.
  const intoNext = currentCount <= 0 ? 0 : windowSeconds * (1 - (limit - 1) / currentCount);
  return secondsToWindowEnd(position, now) + Math.max(1, Math.ceil(intoNext - 1e-9));
}
