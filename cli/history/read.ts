/**
 * Reads a history file line by line (streamed: a 10-minute history is never held whole), handing each
 * parsed event to `each` with its line number. A malformed line throws a HistoryFormatError naming it;
 * an empty line is one too (a writer never writes one). Returns how many events were read.
 */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { type HistoryEvent, HistoryFormatError, parseEvent } from './format.js';

export async function readHistory(
  path: string,
  each: (event: HistoryEvent, line: number) => void,
): Promise<number> {
  const input = createReadStream(path, { encoding: 'utf8' });
  // An unreadable file rejects here rather than as an unhandled stream error.
  const opened = new Promise<void>((resolve, reject) => {
    input.once('open', () => resolve());
    input.once('error', reject);
  });
  await opened;
  const lines = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
  let line = 0;
  try {
    for await (const text of lines) {
      line++;
      if (text.trim() === '') throw new HistoryFormatError(line, 'empty line');
      each(parseEvent(text, line), line);
    }
  } finally {
    lines.close();
    input.destroy();
  }
  return line;
}
