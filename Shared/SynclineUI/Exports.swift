// SynclineUI is SynclineClient with live models for SwiftUI: an app imports one of the two.
@_exported import SynclineClient
