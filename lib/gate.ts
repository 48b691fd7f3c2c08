/**
 * At most `limit` tasks run at once; the others start in the order they came, as running ones end. For
 * work that holds a shared pool (libuv's threads) long enough to starve everything else queued on it.
 */
export class Gate {
  #running = 0;
  readonly #waiting: (() => void)[] = [];

  constructor(readonly limit: number) {}

  /** Tasks running now. */
  get running(): number {
    return this.#running;
  }

  /** Tasks waiting for a slot. */
  get waiting(): number {
    return this.#waiting.length;
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.#running >= this.limit) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    else this.#running += 1;
    try {
      return await task();
    } finally {
      // The slot passes straight to the next waiter, so that no newcomer takes it in between.
      const next = this.#waiting.shift();
      if (next) next();
      else this.#running -= 1;
    }
  }
}
