/** The throw-away PostgreSQL cluster lives with `workbench chaos`, which restarts one too: one implementation. */
export { ThrowawayPostgres } from '../../cli/chaos/services.js';
