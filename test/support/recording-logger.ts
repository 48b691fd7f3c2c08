import type { Logger } from '#lib/log.ts';

/**
 * A logger that keeps each line's level and message in `lines` (and its fields, with `fields: true`:
 * those of the line over those its `child` loggers were given, as createLogger writes them), for tests
 * that check what was logged.
 */
export function recordingLogger(
  lines: { level: string; message: string; fields?: Record<string, unknown> }[],
  options: { fields?: boolean } = {},
  base: Record<string, unknown> = {},
): Logger {
  const at =
    (level: string) =>
    (message: string, fields: Record<string, unknown> = {}): void => {
      lines.push(options.fields ? { level, message, fields: { ...base, ...fields } } : { level, message });
    };
  return {
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    child: (fields) => recordingLogger(lines, options, { ...base, ...fields }),
  };
}
