import type { Clock } from '#lib/ports.ts';

export const systemClock: Clock = { now: () => new Date() };
