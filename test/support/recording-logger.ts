import type { Logger } from '#lib/log.ts';

/**
 * A logger that keeps each line's level and message in `lines` (and its fields, with `fields: true`), for
 * tests that check what was logged.
 */
export function recordingLogger(
  lines: { level: string; message: string; fields?: Record<string, unknown> }[],
  options: { fields?: boolean } = {},
): Logger {
  const at =
    (level: string) =>
    (message: string, fields: Record<string, unknown> = {}): void => {
      lines.push(options.fields ? { level, message, fields } : { level, message });
    };
  const logger: Logger = {
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    child: () => logger,
  };
  return logger;
}
