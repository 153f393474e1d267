/**
 * The opt-in logger hook: `new MeshClient({ logger: console })` or any object with these four methods.
 * Without one the SDK logs nothing (a library must not write to the app's console on its own).
 */
export interface MeshLogger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

const nothing = () => {};

export const silentLogger: MeshLogger = { debug: nothing, info: nothing, warn: nothing, error: nothing };
