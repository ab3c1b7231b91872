// The public API speaks in these types (`JSONValue`, `SpaceRole`, `RecordView`, the views of
// spaces and invitations): an app that imports SynclineClient gets them without a second import.
@_exported import SyncModels
